// Command nemo is the caching proxy's binary. main stays a few lines; the
// command tree (cobra) lives here: serve (the default with no subcommand)
// runs the proxy until SIGTERM, SIGINT or /quitquitquit and then drains it;
// version prints the build stamped with -ldflags "-X main.version=…";
// shutdown asks a running nemo to drain and waits until it has exited (a
// Kubernetes preStop hook); health checks one probe endpoint (Kubernetes
// exec probes, since the admin listener stays on loopback); config print
// shows the effective configuration with secrets redacted; bench runs the
// Nemo paper's experiments and writes tables and plots (package
// internal/bench; it reads no configuration, only its own flags). Every
// other command reads the same configuration (flags > NEMO_* environment > YAML file), and
// an invalid configuration or command line exits with status 2, a drain that
// ran out of listen.shutdown_grace with writes the store has not received
// (the WAL keeps them) with 3, any other failure with 1.
package main
