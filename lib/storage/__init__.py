"""The database infrastructure every app shares, and the only code in lib that uses the connection
itself: `held_writes` (statements a storage module built, sent with the transaction's next one through
Django's `execute_wrapper` hook), `pg_listen` (LISTEN on a connection of its own, NOTIFY in the
sender's transaction) and `pool_checks` (a pooled connection checked only when it may have died). None
builds a query of the domain: the apps' storage modules do."""
