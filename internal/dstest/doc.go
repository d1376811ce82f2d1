// Package dstest holds test helpers for nemo's Datastore packages: finding
// the Datastore emulator the test run started (NEMO_TEST_DATASTORE; a test
// that needs it fails when it is unset, unless -short), finding the
// Firestore emulator in Datastore mode when the run started one too
// (NEMO_TEST_FIRESTORE; optional: tests compare with it when it is there
// and with what it was recorded answering otherwise), and minting a fresh
// project id per test so tests share one emulator without wiping it under
// each other.
package dstest
