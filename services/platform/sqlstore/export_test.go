package sqlstore

// NewTestDB is a DB of either database with no connection, for Rebind and
// Placeholder.
func NewTestDB(postgres bool) *DB { return &DB{postgres: postgres} }
