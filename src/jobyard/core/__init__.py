"""Engine logic. Every function takes a connection first; the caller owns the transaction."""
