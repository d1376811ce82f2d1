// Package aztest holds test helpers for the Azure Table packages: the
// Azurite endpoint the tests talk to (NEMO_TEST_AZURITE, started by
// .ci/test), its well-known development account and key, connection
// strings, and unique table names; and Private, an Azurite of a test's own
// (from NEMO_TEST_NODE_MODULES) for tests whose nemo processes must not
// meet other tests' data in the shared account. A test that needs Azurite fails when the
// variable is unset, unless it runs under -short outside CI, where it is
// skipped (internal/testenv): a skipped test must never pass for a run
// that was meant to cover it.
package aztest
