package datastore

import (
	"context"
	"fmt"
	"slices"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
)

// RunAggregationQuery implements datastorepb.DatastoreServer: count, sum
// and avg computed by nemo over the nested query's results (its offset and
// limit apply first), so it works whatever the backend supports. Sum and
// avg read the indexed integer and double values of the property and skip
// every other value (and arrays); a sum of integers stays an integer unless
// it overflows. A query with several aggregations, one of them a sum or
// an average, aggregates only the entities that have an indexed value of
// every property summed or averaged (see aggregated).
func (f *Frontend) RunAggregationQuery(ctx context.Context, req *datastorepb.RunAggregationQueryRequest) (*datastorepb.RunAggregationQueryResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	aq, err := aggregationQueryOf(req)
	if err != nil {
		return nil, err
	}
	if aq == nil || aq.GetNestedQuery() == nil {
		return nil, invalid("An aggregation query with a nested query is required.")
	}
	aggs := aq.GetAggregations()
	if len(aggs) == 0 {
		return nil, invalid("An aggregation query needs at least one aggregation.")
	}
	aliases := map[string]bool{}
	for i, a := range aggs {
		alias := aliasOf(a, i)
		if aliases[alias] {
			return nil, invalid("The alias %q is used twice.", alias)
		}
		aliases[alias] = true
		switch op := a.GetOperator().(type) {
		case *datastorepb.AggregationQuery_Aggregation_Count_:
			if up := op.Count.GetUpTo(); up != nil && up.GetValue() <= 0 {
				return nil, invalid("count up_to must be positive")
			}
		case *datastorepb.AggregationQuery_Aggregation_Sum_:
			if op.Sum.GetProperty().GetName() == "" {
				return nil, invalid("sum needs a property")
			}
		case *datastorepb.AggregationQuery_Aggregation_Avg_:
			if op.Avg.GetProperty().GetName() == "" {
				return nil, invalid("avg needs a property")
			}
		default:
			return nil, invalid("Unknown aggregation.")
		}
	}
	nested := aq.GetNestedQuery()
	pl, err := f.planQuery(req.GetProjectId(), req.GetDatabaseId(), req.GetPartitionId(), nested)
	if err != nil {
		return nil, err
	}
	s, newID, done, err := f.openRead(req.GetReadOptions())
	if err != nil {
		return nil, err
	}
	defer done()
	need := 0
	if pl.limit >= 0 {
		need = pl.offset + pl.limit
	}
	scan, err := f.planScanner(ctx, pl, s)
	if err != nil {
		return nil, err
	}
	res, err := pl.collect(ctx, scan, need)
	if err != nil {
		return nil, toStatus(err)
	}
	rows := res.rows[min(pl.offset, len(res.rows)):]
	if pl.limit >= 0 && len(rows) > pl.limit {
		rows = rows[:pl.limit]
	}
	props := aggregate(aggs, rows)
	return &datastorepb.RunAggregationQueryResponse{
		Batch: &datastorepb.AggregationResultBatch{
			AggregationResults: []*datastorepb.AggregationResult{{AggregateProperties: props}},
			MoreResults:        datastorepb.QueryResultBatch_NO_MORE_RESULTS,
			ReadTime:           readTime(s),
		},
		Query:       aq,
		Transaction: newID,
	}, nil
}

func aliasOf(a *datastorepb.AggregationQuery_Aggregation, i int) string {
	if a.GetAlias() != "" {
		return a.GetAlias()
	}
	return fmt.Sprintf("property_%d", i+1)
}

func aggregate(aggs []*datastorepb.AggregationQuery_Aggregation, rows []row) map[string]*datastorepb.Value {
	rows = aggregated(aggs, rows)
	// Projection rows of one entity count once for sums and averages.
	var ents []*datastorepb.Entity
	var last []byte
	for _, r := range rows {
		if last == nil || string(last) != string(r.pos.key) {
			ents = append(ents, r.res.Entity)
		}
		last = r.pos.key
	}
	out := map[string]*datastorepb.Value{}
	for i, a := range aggs {
		var v *datastorepb.Value
		switch op := a.GetOperator().(type) {
		case *datastorepb.AggregationQuery_Aggregation_Count_:
			n := int64(len(rows))
			if up := op.Count.GetUpTo(); up != nil {
				n = min(n, up.GetValue())
			}
			v = &datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: n}}
		case *datastorepb.AggregationQuery_Aggregation_Sum_:
			v, _ = sum(ents, op.Sum.GetProperty().GetName())
		case *datastorepb.AggregationQuery_Aggregation_Avg_:
			total, n := sum(ents, op.Avg.GetProperty().GetName())
			if n == 0 {
				v = &datastorepb.Value{ValueType: &datastorepb.Value_NullValue{}}
			} else {
				v = &datastorepb.Value{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: asFloat(total) / float64(n)}}
			}
		}
		out[aliasOf(a, i)] = v
	}
	return out
}

// aggregated is the rows a query with several aggregations aggregates:
// the service runs one over the index of the properties it sums or
// averages, so only the entities holding an indexed value of every one of
// them are counted, summed and averaged (count, sum(I) and avg(F) over
// {I: 1, F: 2.0} and {I: 10} give 1, 1 and 2.0, as the Firestore emulator
// answers). A single aggregation, or counts alone, take every row.
func aggregated(aggs []*datastorepb.AggregationQuery_Aggregation, rows []row) []row {
	if len(aggs) < 2 {
		return rows
	}
	var props []string
	for _, a := range aggs {
		switch op := a.GetOperator().(type) {
		case *datastorepb.AggregationQuery_Aggregation_Sum_:
			props = append(props, op.Sum.GetProperty().GetName())
		case *datastorepb.AggregationQuery_Aggregation_Avg_:
			props = append(props, op.Avg.GetProperty().GetName())
		}
	}
	if len(props) == 0 {
		return rows
	}
	return slices.DeleteFunc(slices.Clone(rows), func(r row) bool {
		return slices.ContainsFunc(props, func(p string) bool { return len(indexValues(r.res.GetEntity(), p)) == 0 })
	})
}

func asFloat(v *datastorepb.Value) float64 {
	if d, ok := v.GetValueType().(*datastorepb.Value_DoubleValue); ok {
		return d.DoubleValue
	}
	return float64(v.GetIntegerValue())
}

// sum adds the indexed numeric values of a property (not array elements)
// and counts them: a value excluded from indexes is not aggregated, as the
// service aggregates from its indexes.
func sum(ents []*datastorepb.Entity, name string) (*datastorepb.Value, int) {
	var isum int64
	var fsum float64
	double, n := false, 0
	for _, e := range ents {
		v, ok := e.GetProperties()[name]
		if !ok || v.GetExcludeFromIndexes() {
			continue
		}
		switch x := v.GetValueType().(type) {
		case *datastorepb.Value_IntegerValue:
			n++
			if s := isum + x.IntegerValue; !double && (x.IntegerValue > 0 && s < isum || x.IntegerValue < 0 && s > isum) {
				double, fsum = true, float64(isum)+float64(x.IntegerValue)
			} else if double {
				fsum += float64(x.IntegerValue)
			} else {
				isum = s
			}
		case *datastorepb.Value_DoubleValue:
			n++
			if !double {
				double, fsum = true, float64(isum)
			}
			fsum += x.DoubleValue
		}
	}
	if double {
		return &datastorepb.Value{ValueType: &datastorepb.Value_DoubleValue{DoubleValue: fsum}}, n
	}
	return &datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: isum}}, n
}
