package dstest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/nemocache/nemo/internal/testenv"
)

// EnvDatastore names the emulator's host:port; .ci/test exports it.
const EnvDatastore = "NEMO_TEST_DATASTORE"

// Emulator returns the Datastore emulator's host:port. Without one the test
// fails (the emulator is part of the test environment), or is skipped under
// -short outside CI.
func Emulator(t testing.TB) string {
	t.Helper()
	return required(t, EnvDatastore, "start the emulator and export "+EnvDatastore+"=127.0.0.1:8081")
}

// required returns env's value; without one the test fails (skipped
// under -short outside CI: testenv.Missing), saying how to get one.
func required(t testing.TB, env, how string) string {
	t.Helper()
	h := os.Getenv(env)
	if h == "" {
		testenv.Missing(t, env+" is not set", "run .ci/test, or "+how)
	}
	return h
}

// EnvFirestore names the host:port of a Firestore emulator started with
// --database-mode=datastore-mode; .ci/test starts one and exports it.
const EnvFirestore = "NEMO_TEST_FIRESTORE"

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

// FirestoreEmulator returns the Firestore emulator's (Datastore mode)
// host:port: the query engine production Datastore runs on, which tests
// follow where the two emulators disagree (checking their recorded
// answers against it) and run nemo in front of. Without one the test
// fails, as without the Datastore emulator (.ci/test starts both), or is
// skipped under -short outside CI.
func FirestoreEmulator(t testing.TB) string {
	t.Helper()
	return required(t, EnvFirestore, "start cloud_firestore_emulator --database-mode=datastore-mode and export "+EnvFirestore+"=127.0.0.1:8082")
}
