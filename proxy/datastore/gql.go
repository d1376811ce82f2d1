package datastore

import (
	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/proxy/datastore/internal/gql"
)

// GQL is translated into the structured query the service would build from
// it (internal/gql) and run like one, whatever the backend and inside
// transactions too; the response carries that query, as the service's
// does.

// queryOf returns a RunQuery request's structured query, translating GQL.
func queryOf(req *datastorepb.RunQueryRequest) (*datastorepb.Query, error) {
	if g := req.GetGqlQuery(); g != nil {
		return gql.Query(g, gqlPartition(req.GetProjectId(), req.GetDatabaseId(), req.GetPartitionId()))
	}
	return req.GetQuery(), nil
}

// aggregationQueryOf returns a RunAggregationQuery request's aggregation
// query, translating GQL.
func aggregationQueryOf(req *datastorepb.RunAggregationQueryRequest) (*datastorepb.AggregationQuery, error) {
	if g := req.GetGqlQuery(); g != nil {
		return gql.AggregationQuery(g, gqlPartition(req.GetProjectId(), req.GetDatabaseId(), req.GetPartitionId()))
	}
	return req.GetAggregationQuery(), nil
}

// gqlPartition is where GQL's KEY() literals are when they name no
// partition: the request's.
func gqlPartition(project, database string, pid *datastorepb.PartitionId) *datastorepb.PartitionId {
	return &datastorepb.PartitionId{ProjectId: project, DatabaseId: database, NamespaceId: pid.GetNamespaceId()}
}
