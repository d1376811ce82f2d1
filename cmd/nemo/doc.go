// Command nemo is the caching proxy's binary. main stays a few lines; the
// command tree (cobra) lives here: serve (the default with no subcommand)
// runs the proxy until SIGTERM, SIGINT or /quitquitquit and then drains it;
// version prints the build stamped with -ldflags "-X main.version=…";
// shutdown asks a running nemo to drain and waits until it has exited (a
// Kubernetes preStop hook); health checks one probe endpoint of listen.http
// (for scripts); config print shows the effective configuration with
// secrets redacted; --version prints what version does. Each command takes
// only the flags it reads, and has long help and an example. The benchmark
// is a binary of its own, cmd/nemo-bench, so this one links no plotting
// (TestSidecarLinksNoBenchmark). Process-wide setup lives here too: the
// memory limit (memlimit.go) and OpenTelemetry tracing (tracing.go). Every
// command reads the same configuration (flags > NEMO_* environment > YAML file), and
// an invalid configuration or command line exits with status 2, a drain that
// ran out of listen.shutdown_grace with writes the store has not received
// (the WAL keeps them) with 3, any other failure with 1.
package main
