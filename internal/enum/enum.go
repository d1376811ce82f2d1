package enum

import "strings"

// Or renders vals as "a, b or c" ("a or b" for two, "a" for one, "" for
// none), the form the engine's option messages use.
func Or[T ~string](vals []T) string {
	var b strings.Builder
	for i, v := range vals {
		switch {
		case i == 0:
		case i == len(vals)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(string(v))
	}
	return b.String()
}
