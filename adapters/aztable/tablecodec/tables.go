package tablecodec

import "strings"

// TablesKeyspace is the engine keyspace that lists the tables of the
// account: one record per table, keyed by TableKey(name), whose value is the
// name as it was created. It lives in the engine so that table creation and
// deletion go through the same WAL and write-back as entities; the aztables
// adapter maps it onto the account's real table list. Its name cannot be an
// Azure table name (those are alphanumeric), so it never collides with one.
const TablesKeyspace = "__tables__"

// TableKey is the key of table name in TablesKeyspace. Azure table names
// are case-insensitive ("Orders" and "orders" are one table), so the key is
// the lower-case name; ASCII is all a valid name can contain.
func TableKey(name string) []byte { return []byte(strings.ToLower(name)) }
