package node

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/nemocache/nemo/cache"
)

// conflictFile appends write-back conflicts to a file, one JSON object a
// line (cache.Conflict's fields; keys and values base64), synced after
// each: they are acknowledged writes that lost, and an operator may replay
// them. It opens the file on the first conflict.
type conflictFile struct {
	path string
	log  *slog.Logger

	mu sync.Mutex
	f  *os.File
}

func (c *conflictFile) record(cf cache.Conflict) {
	line, err := json.Marshal(cf)
	if err == nil {
		err = c.append(append(line, '\n'))
	}
	if err != nil {
		c.log.Error("write-back conflict could not be saved; the log line above is all that is left of it",
			"path", c.path, "keyspace", cf.Keyspace, "key", cf.Key, "err", err)
	}
}

func (c *conflictFile) append(line []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
			return fmt.Errorf("conflicts file: %w", err)
		}
		f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("conflicts file: %w", err)
		}
		c.f = f
	}
	if _, err := c.f.Write(line); err != nil {
		return fmt.Errorf("conflicts file: %w", err)
	}
	return c.f.Sync()
}

func (c *conflictFile) close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return nil
	}
	err := c.f.Close()
	c.f = nil
	return err
}
