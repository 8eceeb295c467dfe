DROP FUNCTION chorus_send_messages(BIGINT, TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TIMESTAMP);
