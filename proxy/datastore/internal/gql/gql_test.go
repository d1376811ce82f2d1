package gql

import (
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

var testPartition = &datastorepb.PartitionId{ProjectId: "p", NamespaceId: "ns"}

func val(text string) *datastorepb.GqlQueryParameter {
	v := &datastorepb.Value{}
	if err := prototext.Unmarshal([]byte(text), v); err != nil {
		panic(err)
	}
	return &datastorepb.GqlQueryParameter{ParameterType: &datastorepb.GqlQueryParameter_Value{Value: v}}
}

func cursor(b string) *datastorepb.GqlQueryParameter {
	return &datastorepb.GqlQueryParameter{ParameterType: &datastorepb.GqlQueryParameter_Cursor{Cursor: []byte(b)}}
}

// check compares a parsed message with want (prototext) or an error with
// want (its message, prefixed "error: ").
func check(t *testing.T, name string, got proto.Message, err error, want string, into proto.Message) {
	t.Helper()
	if msg, ok := strings.CutPrefix(want, "error: "); ok {
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != msg {
			t.Errorf("%s: got %v (%v), want error %q", name, err, got, msg)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if err := prototext.Unmarshal([]byte(want), into); err != nil {
		t.Fatalf("%s: bad expectation: %v", name, err)
	}
	if !proto.Equal(got, into) {
		t.Errorf("%s:\ngot  %v\nwant %v", name, prototext.Format(got), prototext.Format(into))
	}
}

func TestQuery(t *testing.T) {
	named := map[string]*datastorepb.GqlQueryParameter{
		"i": val("integer_value: 3"), "s": val(`string_value: "x"`), "c": cursor("cur"), "arr": val("array_value: {values: {integer_value: 1}}"),
	}
	for _, tc := range []struct {
		q          string
		named      map[string]*datastorepb.GqlQueryParameter
		positional []*datastorepb.GqlQueryParameter
		noLiterals bool
		want       string
	}{
		{q: "SELECT *", want: ""},
		{q: "select * from `Odd ``Kind`", want: `kind: {name: "Odd ` + "`" + `Kind"}`},
		{q: "SELECT __key__ FROM K", want: `kind: {name: "K"} projection: {property: {name: "__key__"}}`},
		{q: "SELECT a, K.b, x.y FROM K", want: `kind: {name: "K"} projection: {property: {name: "a"}} projection: {property: {name: "b"}} projection: {property: {name: "x.y"}}`},
		{q: "SELECT DISTINCT a, b FROM K", want: `kind: {name: "K"} projection: {property: {name: "a"}} projection: {property: {name: "b"}} distinct_on: {name: "a"} distinct_on: {name: "b"}`},
		{q: "SELECT DISTINCT ON (a) * FROM K", want: `kind: {name: "K"} distinct_on: {name: "a"}`},
		{q: "SELECT * FROM K WHERE a >= 1 AND 'x' < s", want: `kind: {name: "K"} filter: {composite_filter: {op: AND
			filters: {property_filter: {property: {name: "a"} op: GREATER_THAN_OR_EQUAL value: {integer_value: 1}}}
			filters: {property_filter: {property: {name: "s"} op: GREATER_THAN value: {string_value: "x"}}}}}`},
		{q: "SELECT * FROM K WHERE a = 1 OR (b IS NULL AND c != 2.5)", want: `kind: {name: "K"} filter: {composite_filter: {op: OR
			filters: {property_filter: {property: {name: "a"} op: EQUAL value: {integer_value: 1}}}
			filters: {composite_filter: {op: AND
				filters: {property_filter: {property: {name: "b"} op: EQUAL value: {null_value: NULL_VALUE}}}
				filters: {property_filter: {property: {name: "c"} op: NOT_EQUAL value: {double_value: 2.5}}}}}}}`},
		{q: "SELECT * FROM K WHERE a IN ARRAY(1, 'b') AND c NOT IN ARRAY(TRUE) AND d IN 4 AND e CONTAINS @i", named: named, want: `kind: {name: "K"} filter: {composite_filter: {op: AND
			filters: {property_filter: {property: {name: "a"} op: IN value: {array_value: {values: {integer_value: 1} values: {string_value: "b"}}}}}
			filters: {property_filter: {property: {name: "c"} op: NOT_IN value: {array_value: {values: {boolean_value: true}}}}}
			filters: {property_filter: {property: {name: "d"} op: EQUAL value: {integer_value: 4}}}
			filters: {property_filter: {property: {name: "e"} op: EQUAL value: {integer_value: 3}}}}}`},
		{q: "SELECT * FROM K WHERE a IN @arr", named: named, want: `kind: {name: "K"} filter: {property_filter: {property: {name: "a"} op: IN value: {array_value: {values: {integer_value: 1}}}}}`},
		{q: "SELECT * WHERE __key__ HAS ANCESTOR KEY(P, 'x', Q, 7)", want: `filter: {property_filter: {property: {name: "__key__"} op: HAS_ANCESTOR
			value: {key_value: {partition_id: {project_id: "p" namespace_id: "ns"} path: {kind: "P" name: "x"} path: {kind: "Q" id: 7}}}}}`},
		{q: "SELECT * WHERE KEY(PROJECT('o'), NAMESPACE('n'), P, 1) HAS DESCENDANT __key__", want: `filter: {property_filter: {property: {name: "__key__"} op: HAS_ANCESTOR
			value: {key_value: {partition_id: {project_id: "o" namespace_id: "n"} path: {kind: "P" id: 1}}}}}`},
		{q: "SELECT * WHERE KEY(DATABASE('d'), P, 1) = k", want: `filter: {property_filter: {property: {name: "k"} op: EQUAL
			value: {key_value: {partition_id: {project_id: "p" database_id: "d"} path: {kind: "P" id: 1}}}}}`},
		{q: `SELECT * FROM K WHERE b = BLOB('aGk') AND d = DATETIME('2020-01-02T03:04:05.5+01:00') AND s = "it""s\n" AND g = LATLNG(1, -2.5)`, want: `kind: {name: "K"} filter: {composite_filter: {op: AND
			filters: {property_filter: {property: {name: "b"} op: EQUAL value: {blob_value: "hi"}}}
			filters: {property_filter: {property: {name: "d"} op: EQUAL value: {timestamp_value: {seconds: 1577930645 nanos: 500000000}}}}
			filters: {property_filter: {property: {name: "s"} op: EQUAL value: {string_value: "it\"s\n"}}}
			filters: {property_filter: {property: {name: "g"} op: EQUAL value: {geo_point_value: {latitude: 1 longitude: -2.5}}}}}}`},
		{q: "SELECT * FROM K WHERE d = DATETIME('1000-03-01T00:00:00Z')", want: `kind: {name: "K"} filter: {property_filter: {property: {name: "d"} op: EQUAL value: {timestamp_value: {seconds: -30604608000}}}}`},
		{q: "SELECT * FROM K ORDER BY a DESC, b ASC, c LIMIT 5 OFFSET 2", want: `kind: {name: "K"} order: {property: {name: "a"} direction: DESCENDING}
			order: {property: {name: "b"} direction: ASCENDING} order: {property: {name: "c"} direction: ASCENDING} limit: {value: 5} offset: 2`},
		{q: "SELECT * FROM K LIMIT @c", named: named, want: `kind: {name: "K"} end_cursor: "cur"`},
		{q: "SELECT * FROM K LIMIT FIRST(@i, @c) OFFSET @c + @1", named: named, positional: []*datastorepb.GqlQueryParameter{val("integer_value: 2")},
			want: `kind: {name: "K"} end_cursor: "cur" limit: {value: 3} start_cursor: "cur" offset: 2`},
		{q: "SELECT * FROM K WHERE a = @1 AND b = @2 AND c = @1", positional: []*datastorepb.GqlQueryParameter{val("integer_value: 1"), val(`string_value: "s"`)}, noLiterals: true,
			want: `kind: {name: "K"} filter: {composite_filter: {op: AND
				filters: {property_filter: {property: {name: "a"} op: EQUAL value: {integer_value: 1}}}
				filters: {property_filter: {property: {name: "b"} op: EQUAL value: {string_value: "s"}}}
				filters: {property_filter: {property: {name: "c"} op: EQUAL value: {integer_value: 1}}}}}`},

		{q: "", want: "error: Encountered \"<EOF>\" at line 0, column 0.\nWas expecting:\n    \"select\" ...\n    "},
		{q: "SELECT * FROM K WHERE", want: "error: Encountered \"<EOF>\" at line 1, column 21.\nWas expecting:\n    \"(\" ...\n    "},
		{q: "SELECT a b FROM K", want: "error: Encountered \" <UNQUOTED_NAME> \"b \"\" at line 1, column 10.\nWas expecting one of:\n    <EOF> \n    \"from\" ...\n    \"group\" ...\n    \"limit\" ...\n    \"offset\" ...\n    \"order\" ...\n    \"where\" ...\n    \",\" ...\n    \".\" ...\n    \".\" ...\n    \",\" ...\n    \",\" ...\n    "},
		{q: "SELECT * FROM K WHERE a = 'x", want: `error: Lexical error at line 1, column 29.  Encountered: <EOF> after : "\'x"`},
		{q: "SELECT * FROM K WHERE a = - 1", want: `error: Lexical error at line 1, column 28.  Encountered: " " (32), after : "-"`},
		{q: "SELECT * FROM K WHERE a = 1e", want: `error: Invalid double literal: For input string: "1e"`},
		{q: "SELECT * FROM K WHERE a = 99999999999999999999", want: `error: Invalid integer literal: For input string: "99999999999999999999"`},
		{q: "SELECT * FROM K WHERE a = 'x'", noLiterals: true, want: `error: Disallowed literal: 'x'.`},
		{q: "SELECT * FROM K WHERE a IS NULL", noLiterals: true, want: `error: Disallowed literal: NULL.`},
		{q: "SELECT * FROM K LIMIT 5", noLiterals: true, want: `error: Disallowed literal: 5.`},
		{q: "SELECT * FROM K WHERE a = key(K, 1)", noLiterals: true, want: `error: Disallowed literal: key.`},
		{q: "SELECT * FROM K WHERE a = @x", want: "error: Absent named binding: x."},
		{q: "SELECT * FROM K WHERE a = @0", want: "error: Invalid binding site @0."},
		{q: "SELECT * FROM K WHERE a = @2", positional: []*datastorepb.GqlQueryParameter{val("integer_value: 1")}, want: "error: Absent positional binding: 2."},
		{q: "SELECT * FROM K", positional: []*datastorepb.GqlQueryParameter{val("integer_value: 1")}, want: "error: Unused positional binding: 1."},
		{q: "SELECT * FROM K WHERE a = @c", named: named, want: "error: Binding site @c for value bound to non-value parameter."},
		{q: "SELECT * FROM K LIMIT @s", named: named, want: "error: Binding site @s for limit bound to non-integer value parameter."},
		{q: "SELECT * FROM K LIMIT FIRST(1, 2)", want: "error: Expected limit cursor instead of 2."},
		{q: "SELECT * FROM K OFFSET 1 + 2", want: `error: Encountered "+" after integer offset.`},
		{q: "SELECT * FROM K LIMIT -1", want: "error: The limit -1 is < 0."},
		{q: "SELECT * FROM K LIMIT next(1)", want: `error: Unexpected name "next" (after LIMIT).`},
		{q: "SELECT DISTINCT * FROM K", want: `error: Encountered "*" immediately after DISTINCT.`},
		{q: "SELECT * FROM K GROUP BY a", want: "error: GROUP BY not supported."},
		{q: "SELECT * FROM K WHERE a = f(1)", want: `error: Unknown function "f".`},
		{q: "SELECT * FROM K WHERE a = BLOB('a=')", want: `error: Invalid blob text: "a=".`},
		{q: "SELECT * FROM K WHERE a = DATETIME('2020-01-01T00:00:00+00:00')", want: `error: Invalid datetime text (zero offset must be Z): "2020-01-01T00:00:00+00:00"`},
		{q: "SELECT * FROM K WHERE a = DATETIME('1582-10-10T00:00:00Z')", want: `error: Invalid datetime text (parse failure): "1582-10-10T00:00:00Z"`},
		{q: "SELECT * FROM K WHERE a = KEY(NAMESPACE('n'), PROJECT('p'), K, 1)", want: "error: A key's project must precede its namespace."},
		{q: "SELECT * FROM K WHERE ST_CONTAINS(CIRCLE(LATLNG(1, 2), 3), g)", want: "error: using an StContains filter is not allowed"},
		{q: "SELECT COUNT(*) FROM K", want: "error: Expecting ENTITY_QUERY, but got AGGREGATION_QUERY. Use Datastore.RunAggregationQuery API instead for such queries."},
		{q: "AGGREGATE COUNT(*) OVER (SELECT * FROM K)", want: "error: Expecting ENTITY_QUERY, but got AGGREGATION_QUERY. Use Datastore.RunAggregationQuery API instead for such queries."},
		{q: "SELECT * FROM K", named: map[string]*datastorepb.GqlQueryParameter{"1a": val("integer_value: 1")}, want: `error: GQL query parameter name "1a" starts with a digit.`},
		{q: "SELECT * FROM K", named: map[string]*datastorepb.GqlQueryParameter{"__a__": val("integer_value: 1")}, want: `error: The GQL query parameter name "__a__" is reserved.`},
		{q: "SELECT * FROM K", named: map[string]*datastorepb.GqlQueryParameter{"a-b": val("integer_value: 1")}, want: `error: GQL query parameter name "a-b" contains an invalid character.`},
		{q: "SELECT * FROM K", named: map[string]*datastorepb.GqlQueryParameter{"a": {}}, want: "error: A GQL query parameter is empty."},
	} {
		g := &datastorepb.GqlQuery{QueryString: tc.q, AllowLiterals: !tc.noLiterals, NamedBindings: tc.named, PositionalBindings: tc.positional}
		q, err := Query(g, testPartition)
		check(t, tc.q, q, err, tc.want, &datastorepb.Query{})
	}
}

func TestAggregationQuery(t *testing.T) {
	for _, tc := range []struct{ q, want string }{
		{"SELECT COUNT(*) FROM K", `aggregations: {count: {}} nested_query: {kind: {name: "K"}}`},
		{"select count(*) as n, count_up_to(5), sum(a) AS total, avg(K.b) from K where a > 1 or b = 2", `
			aggregations: {count: {} alias: "n"} aggregations: {count: {up_to: {value: 5}}}
			aggregations: {sum: {property: {name: "a"}} alias: "total"} aggregations: {avg: {property: {name: "K.b"}}}
			nested_query: {kind: {name: "K"} filter: {composite_filter: {op: OR
				filters: {property_filter: {property: {name: "a"} op: GREATER_THAN value: {integer_value: 1}}}
				filters: {property_filter: {property: {name: "b"} op: EQUAL value: {integer_value: 2}}}}}}`},
		{"SELECT COUNT(*)", `aggregations: {count: {}} nested_query: {}`},
		{"AGGREGATE COUNT(*), AVG(a) OVER (SELECT * FROM K WHERE K.a > 1 ORDER BY a LIMIT 10)", `
			aggregations: {count: {}} aggregations: {avg: {property: {name: "a"}}}
			nested_query: {kind: {name: "K"} filter: {property_filter: {property: {name: "a"} op: GREATER_THAN value: {integer_value: 1}}}
				order: {property: {name: "a"} direction: ASCENDING} limit: {value: 10}}`},
		{"SELECT COUNT(a) FROM K", "error: Cloud Datastore only supports counts over the entire result set (i.e. `COUNT(*)`)"},
		{"SELECT MAX(a) FROM K", "error: Unexpected aggregation function: MAX"},
		{"SELECT * FROM K", "error: Expecting AGGREGATION_QUERY, but got ENTITY_QUERY. Use Datastore.RunQuery API instead for such queries."},
		{"SELECT a FROM K", "error: Expecting AGGREGATION_QUERY, but got ENTITY_QUERY. Use Datastore.RunQuery API instead for such queries."},
		{"AGGREGATE COUNT(*) OVER (AGGREGATE COUNT(*) OVER (SELECT *))", "error: Expecting ENTITY_QUERY, but got AGGREGATION_QUERY. Use Datastore.RunAggregationQuery API instead for such queries."},
		{"SELECT COUNT(*) FROM K ORDER BY a", "error: Encountered \" \"order\" \"ORDER \"\" at line 1, column 24.\nWas expecting one of:\n    <EOF> \n    \"where\" ...\n    "},
		{"AGGREGATE COUNT(*) OVER SELECT", "error: Encountered \" \"select\" \"SELECT \"\" at line 1, column 25.\nWas expecting:\n    \"(\" ...\n    "},
	} {
		aq, err := AggregationQuery(&datastorepb.GqlQuery{QueryString: tc.q, AllowLiterals: true}, testPartition)
		check(t, tc.q, aq, err, tc.want, &datastorepb.AggregationQuery{})
	}
}

// TestLexer pins positions and longest matches.
func TestLexer(t *testing.T) {
	lx := newLexer("SELECT\r\n\t`a``b` <= -1.5e+3e @x @12 selected 'it''s' +.")
	var got []string
	for {
		tok, err := lx.next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %d:%d", kindImage[tok.kind], tok.image, tok.line, tok.col))
		if tok.kind == tEOF {
			break
		}
	}
	want := []string{`"select" SELECT 1:1`, "<QUOTED_NAME> `a``b` 2:2", `"<=" <= 2:9`, "<DOUBLE> -1.5e+3 2:12", "<UNQUOTED_NAME> e 2:19",
		"<NAME_BINDING_SITE> @x 2:21", "<POSITION_BINDING_SITE> @12 2:24", "<UNQUOTED_NAME> selected 2:28",
		"<SINGLE_QUOTE_STRING> 'it''s' 2:37", `"+" + 2:45`, `"." . 2:46`, "<EOF>  2:46"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tokens:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNestingBound: nesting is followed by recursion, so it is bounded.
func TestNestingBound(t *testing.T) {
	deep := func(n int, open, inner, close string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	for _, tc := range []struct {
		q  string
		ok bool
	}{
		{"SELECT * WHERE " + deep(maxDepth, "(", "a = 1", ")"), true},
		{"SELECT * WHERE " + deep(maxDepth+1, "(", "a = 1", ")"), false},
		{"SELECT * WHERE a IN " + deep(maxDepth, "ARRAY(", "1", ")"), true},
		{"SELECT * WHERE a IN " + deep(maxDepth+1, "ARRAY(", "1", ")"), false},
		{"SELECT * WHERE " + strings.Repeat("(", 1<<20), false},
	} {
		_, err := Query(&datastorepb.GqlQuery{QueryString: tc.q, AllowLiterals: true}, testPartition)
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "more than 1000 deep") {
			t.Errorf("%.40s... (%d bytes): %v", tc.q, len(tc.q), err)
		}
	}
}
