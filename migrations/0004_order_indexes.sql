-- Indexes that hand out a topic's or a namespace's rows in row_id (gateway) order.
--
-- `eventgate query 'namespace==k8s.io' --limit 100` asks for the first 100 rows of a
-- namespace by row_id. The (namespace, timestamp) index keeps a namespace's rows in
-- timestamp order, so SQLite had to fetch and sort every row of the namespace (most
-- of a busy store) before returning the first 100. An index on the column alone
-- stores (namespace, row_id): equal values in row_id order, read without sorting.
-- Queries with a time range keep using the (column, timestamp) indexes.
CREATE INDEX events_topic_row ON events (topic);
CREATE INDEX events_namespace_row ON events (namespace);
