package loupe.spark;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system, with permissions set in the JVM.
 *
 * <p>Without Hadoop's native library, RawLocalFileSystem sets the permission of every file
 * it creates by forking {@code chmod}: two processes per part a Spark job writes (the data
 * file and its checksum file), most of a small partitioned write's time. This one sets them
 * with java.nio instead, and writes no checksum files (Loupe's readers never read them).
 */
public class LocalFileSystem extends RawLocalFileSystem {
  // FsPermission's bits, lowest first: others x/w/r, group x/w/r, owner x/w/r.
  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE,
    PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.GROUP_WRITE,
    PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE,
    PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_READ,
  };

  @Override
  public void setPermission(Path path, FsPermission permission) throws IOException {
    short mode = permission.toShort();
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < BITS.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        set.add(BITS[bit]);
      }
    }
    Files.setPosixFilePermissions(pathToFile(path).toPath(), set);
  }
}
