-- Sends are decided in one place, the server's Rust code, on every engine; these functions
-- stated the same rules a second time in PL/pgSQL. No binary of this release calls them, and
-- the binaries that did cannot run against this release's schema anyway (feed positions
-- replaced the transaction-id columns they read), so they go in the same release.
DROP FUNCTION chorus_send_messages(BIGINT, TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TIMESTAMP);
DROP FUNCTION chorus_send_message(BIGINT, TEXT, TEXT, TEXT, TEXT, TEXT, TIMESTAMP);
