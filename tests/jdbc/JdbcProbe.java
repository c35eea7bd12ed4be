// What a JDBC client (DBeaver, Grafana's Java peers, any JVM tool) does on connecting
// and browsing a schema, through PostgreSQL's own JDBC driver (pgjdbc). Run as a
// single-file program: java -cp /usr/share/java/postgresql.jar JdbcProbe.java URL TABLE
// It prints one line per finding, tab-separated, for a test to compare between
// Loupe and PostgreSQL.
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;

public class JdbcProbe {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        String table = args[1];
        try (Connection conn = DriverManager.getConnection(url)) {
            DatabaseMetaData meta = conn.getMetaData();
            System.out.println("product\t" + (meta.getDatabaseProductName() != null));
            try (ResultSet rs = meta.getSchemas()) {
                while (rs.next()) {
                    if (rs.getString("TABLE_SCHEM").equals("public")) {
                        System.out.println("schema\tpublic");
                    }
                }
            }
            try (ResultSet rs = meta.getTables(null, "public", table, new String[] {"TABLE"})) {
                while (rs.next()) {
                    System.out.println("table\t" + rs.getString("TABLE_NAME") + "\t" + rs.getString("TABLE_TYPE"));
                }
            }
            try (ResultSet rs = meta.getColumns(null, "public", table, null)) {
                while (rs.next()) {
                    System.out.println("column\t" + rs.getString("COLUMN_NAME") + "\t" + rs.getString("TYPE_NAME")
                        + "\t" + rs.getInt("DATA_TYPE") + "\t" + rs.getInt("ORDINAL_POSITION"));
                }
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT a, b FROM " + table + " WHERE a >= ? ORDER BY a")) {
                ps.setInt(1, 2);
                try (ResultSet rs = ps.executeQuery()) {
                    ResultSetMetaData rmeta = rs.getMetaData();
                    System.out.println("result\t" + rmeta.getColumnTypeName(1) + "\t" + rmeta.getColumnTypeName(2));
                    while (rs.next()) {
                        System.out.println("row\t" + rs.getInt(1) + "\t" + rs.getString(2));
                    }
                }
            }
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT 1 + 1")) {
                rs.next();
                System.out.println("simple\t" + rs.getInt(1));
            }
        }
    }
}
