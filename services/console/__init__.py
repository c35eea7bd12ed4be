"""The console: Loupe's introspection relations in a browser, served by Loupe itself.

A small aiohttp server (``loupe console``, started by ``loupe up``) renders HTML on
the server from SQL it runs through the coordinator's PostgreSQL wire protocol as
the logged-in user, so every number on a page comes from a query the page can show
("Show SQL"), under the same roles and authentication as ``psql``. Live pages get
updates from a ``SUBSCRIBE`` pushed as server-sent events while they are open.
"""
