// Package odata parses the OData subset Azure Table Storage accepts in a
// query — the $filter expression language (comparisons eq ne gt ge lt le
// between one property and one typed literal, combined with and / or / not
// and parentheses) and the $select list — and evaluates a parsed filter
// against a tablecodec.Entity with Azure's semantics rather than Azurite's
// (see reference/azurite-known-bugs.md). KeyRange extracts the encoded-key
// range a filter's top-level conjunction pins down, so the frontend can
// answer the query with one range scan of the record buffer and evaluate
// only the residual predicate.
package odata
