package dstest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// EnvDatastore names the emulator's host:port; .ci/test exports it.
const EnvDatastore = "NEMO_TEST_DATASTORE"

// Emulator returns the Datastore emulator's host:port. Without one the test
// fails (the emulator is part of the test environment), or is skipped under
// -short.
func Emulator(t testing.TB) string {
	t.Helper()
	return required(t, EnvDatastore, "start the emulator and export "+EnvDatastore+"=127.0.0.1:8081")
}

// required returns env's value; without one the test fails (skipped
// under -short), saying how to get one.
func required(t testing.TB, env, how string) string {
	t.Helper()
	h := os.Getenv(env)
	if h == "" {
		if testing.Short() {
			t.Skipf("%s is not set (-short)", env)
		}
		t.Fatalf("%s is not set: run .ci/test, or %s", env, how)
	}
	return h
}

// EnvFirestore names the host:port of a Firestore emulator started with
// --database-mode=datastore-mode; .ci/test exports it when the SDK has the
// emulator.
const EnvFirestore = "NEMO_TEST_FIRESTORE"

// Firestore returns the Firestore emulator's (Datastore mode) host:port, or
// "" when the run has none. It is optional: the Firestore emulator runs the
// query engine production Datastore runs on, so tests that follow it where
// the two emulators disagree compare with it when it is there, and with
// its recorded answers when it is not.
func Firestore(t testing.TB) string {
	t.Helper()
	return os.Getenv(EnvFirestore)
}

// Project returns a project id no other test uses, derived from the test's
// name, so tests can run against one shared emulator in parallel.
func Project(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, t.Name())
	if len(name) > 20 {
		name = name[:20]
	}
	return fmt.Sprintf("t-%s-%08x", strings.Trim(name, "-"), rand.Uint32())
}

// FirestoreEmulator is Firestore for tests that run in front of the
// Firestore emulator itself: without one the test fails, as without the
// Datastore emulator (.ci/test starts both), or is skipped under -short.
func FirestoreEmulator(t testing.TB) string {
	t.Helper()
	return required(t, EnvFirestore, "start cloud_firestore_emulator --database-mode=datastore-mode and export "+EnvFirestore+"=127.0.0.1:8082")
}
