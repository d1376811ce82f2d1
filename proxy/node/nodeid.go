package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nemocache/nemo/config"
)

// NodeID is this node's name as a lease holder: coherence.node_id, or an ID
// generated on first use and kept in <data_dir>/node-id, so a restart on the
// same data directory (whose WAL it replays) is the same holder, and any
// other data directory is another.
func NodeID(cfg config.Config) (string, error) {
	if cfg.Coherence.NodeID != "" {
		return cfg.Coherence.NodeID, nil
	}
	path := filepath.Join(cfg.Backend.Embedded.DataDir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil && strings.TrimSpace(string(b)) != "":
		return strings.TrimSpace(string(b)), nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("node: read node id: %w", err)
	}
	host, _ := os.Hostname()
	r := make([]byte, 6)
	if _, err := rand.Read(r); err != nil {
		return "", fmt.Errorf("node: node id: %w", err)
	}
	id := strings.Trim(host+"-"+hex.EncodeToString(r), "-")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("node: node id: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("node: write node id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("node: write node id: %w", err)
	}
	return id, nil
}
