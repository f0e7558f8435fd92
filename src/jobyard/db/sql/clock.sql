-- name: clock_now
-- The database's clock: the only one that decides due-ness and lease expiry.
SELECT now() AS now
