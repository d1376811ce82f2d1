// Package gql translates GQL, Datastore's SQL-like query language, into the
// v1 API's structured queries (datastorepb.Query and AggregationQuery), so
// a frontend can run a GQL query through its structured-query path.
//
// It accepts what the service's GQL parser accepts (as the Datastore
// emulator runs it) and builds the same query: SELECT * | __key__ |
// properties | DISTINCT [ON (...)], FROM with backquoted names, WHERE with
// AND, OR and parentheses, the comparisons, IN, NOT IN, CONTAINS, IS NULL,
// HAS ANCESTOR and (value first) HAS DESCENDANT, ORDER BY, LIMIT n | @cursor
// | FIRST(@cursor, n), OFFSET n | @cursor [+ n]; literals, KEY(...),
// ARRAY(...), BLOB('...'), DATETIME('...'), LATLNG(lat, lng); named and
// positional bindings of values and cursors; allow_literals; and the
// aggregation forms SELECT COUNT(*) | COUNT_UP_TO(n) | SUM(p) | AVG(p)
// [AS alias], ... [FROM kind] [WHERE ...] and AGGREGATE ... OVER (SELECT
// ...). Its errors are INVALID_ARGUMENT with the service's own messages,
// the syntax errors' lists of expected tokens included (see engine.go).
package gql

import (
	"slices"
	"strings"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Query translates an entity query. partition is the request's: KEY()
// literals without a partition of their own are in it.
func Query(g *datastorepb.GqlQuery, partition *datastorepb.PartitionId) (q *datastorepb.Query, err error) {
	err = parse(g, partition, func(p *parser) { q = p.query() })
	return q, err
}

// AggregationQuery translates an aggregation query.
func AggregationQuery(g *datastorepb.GqlQuery, partition *datastorepb.PartitionId) (aq *datastorepb.AggregationQuery, err error) {
	err = parse(g, partition, func(p *parser) { aq = p.aggregation() })
	return aq, err
}

func parse(g *datastorepb.GqlQuery, partition *datastorepb.PartitionId, run func(*parser)) (err error) {
	if err := checkBindings(g); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(syntaxError)
			if !ok {
				panic(r)
			}
			err = status.Error(codes.InvalidArgument, e.msg)
		}
	}()
	p := newParser(g, partition)
	run(p)
	if p.stContains {
		return status.Error(codes.InvalidArgument, "using an StContains filter is not allowed")
	}
	return nil
}

// checkBindings refuses what the service refuses before parsing: a named
// binding whose name is empty, starts with a digit, has a character no
// name may have or is reserved (__x__), and a parameter with neither a
// value nor a cursor.
func checkBindings(g *datastorepb.GqlQuery) error {
	bad := func(format string, args ...any) error { return status.Errorf(codes.InvalidArgument, format, args...) }
	names := make([]string, 0, len(g.GetNamedBindings()))
	for name := range g.GetNamedBindings() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case name == "":
			return bad("The GQL query parameter name is empty. is the empty string.")
		case name[0] >= '0' && name[0] <= '9':
			return bad(`GQL query parameter name "%s" starts with a digit.`, name)
		case strings.ContainsFunc(name, func(r rune) bool { return r < 0x80 && !isNamePart(uint16(r)) }):
			return bad(`GQL query parameter name "%s" contains an invalid character.`, name)
		case len(name) >= 4 && strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__"):
			return bad(`The GQL query parameter name "%s" is reserved.`, name)
		}
		if g.GetNamedBindings()[name].GetParameterType() == nil {
			return bad("A GQL query parameter is empty.")
		}
	}
	for _, param := range g.GetPositionalBindings() {
		if param.GetParameterType() == nil {
			return bad("A GQL query parameter is empty.")
		}
	}
	return nil
}
