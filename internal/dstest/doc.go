// Package dstest holds test helpers for nemo's Datastore packages: finding
// the Datastore emulator and the Firestore emulator in Datastore mode that
// the test run started (NEMO_TEST_DATASTORE, NEMO_TEST_FIRESTORE; a test
// that needs one fails when its variable is unset, unless it runs under
// -short outside CI: internal/testenv), and minting a fresh project id per
// test so tests share one emulator without wiping it under each other.
package dstest
