// Chorus reference client
