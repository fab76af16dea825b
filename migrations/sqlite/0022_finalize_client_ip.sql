-- The address of the client whose finalize request took an order from ready to processing
-- (issue 29): the `certificate_issued` audit record names it, and the certificate is often
-- signed by a worker long after the request was answered (the queue, a restart in between), so
-- it is kept with the order rather than in the request's memory. NULL for orders finalized
-- before this migration and for orders not finalized yet.
-- Keep in step with migrations/postgres/0022_finalize_client_ip.sql.

ALTER TABLE orders ADD COLUMN finalize_client_ip TEXT;
