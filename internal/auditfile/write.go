package auditfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Bounds of the writer's memory: a row group is buffered until it is
// written, so a month of any size costs at most rowGroupRows rows of memory
// (about 30 MB at audit_log's few hundred bytes a row), and writeBatch rows
// are handed to the encoder at a time.
const (
	rowGroupRows = 100_000
	writeBatch   = 1024
)

// File is an export being written: a temporary file beside its final name,
// which Commit makes durable and renames into place, so that a reader (or a
// crash) sees the whole file or none. The file is 0600: the audit log names
// holders and principals.
type File struct {
	path, tmp string
	f         *os.File
	w         *parquet.GenericWriter[Row]
	batch     []Row
	done      bool
}

// Create starts the export dir/name (name ends in .parquet). dir must
// exist: it is the operator's (--out, --audit-export-dir), not created here.
func Create(dir, name string) (*File, error) {
	path := filepath.Join(dir, name)
	f, err := os.CreateTemp(dir, "."+name+".*.tmp") // CreateTemp makes it 0600
	if err != nil {
		return nil, fmt.Errorf("auditfile: %w", err)
	}
	return &File{
		path: path, tmp: f.Name(), f: f,
		w: parquet.NewGenericWriter[Row](f,
			parquet.Compression(&zstd.Codec{Level: zstd.SpeedDefault}),
			parquet.MaxRowsPerRowGroup(rowGroupRows),
			parquet.CreatedBy("claimd", "", "")),
		batch: make([]Row, 0, writeBatch),
	}, nil
}

// Path is where Commit puts the file.
func (x *File) Path() string { return x.path }

// Write adds r to the file.
func (x *File) Write(r *Row) error {
	x.batch = append(x.batch, *r)
	if len(x.batch) == writeBatch {
		return x.flush()
	}
	return nil
}

func (x *File) flush() error {
	_, err := x.w.Write(x.batch)
	clear(x.batch) // drop the references to the rows' strings
	x.batch = x.batch[:0]
	if err != nil {
		return fmt.Errorf("auditfile: write %s: %w", x.tmp, err)
	}
	return nil
}

// Commit finishes the file, fsyncs it, renames it to its final name and
// fsyncs the directory: once Commit returns nil the export survives a
// crash, and only then may its partition be dropped. An existing file of
// the same name is replaced (a pass that exported and failed to drop
// exports again).
func (x *File) Commit() error {
	if err := x.flush(); err != nil {
		return err
	}
	if err := x.w.Close(); err != nil {
		return fmt.Errorf("auditfile: finish %s: %w", x.tmp, err)
	}
	if err := x.f.Sync(); err != nil {
		return fmt.Errorf("auditfile: fsync %s: %w", x.tmp, err)
	}
	if err := x.f.Close(); err != nil {
		return fmt.Errorf("auditfile: close %s: %w", x.tmp, err)
	}
	if err := os.Rename(x.tmp, x.path); err != nil {
		return fmt.Errorf("auditfile: %w", err)
	}
	x.done = true
	d, err := os.Open(filepath.Dir(x.path))
	if err != nil {
		return fmt.Errorf("auditfile: fsync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("auditfile: fsync directory %s: %w", d.Name(), err)
	}
	return nil
}

// Close removes the temporary file of an export that was not committed;
// after Commit it does nothing. Call it in a defer.
func (x *File) Close() error {
	if x.done {
		return nil
	}
	x.done = true
	return errors.Join(x.f.Close(), os.Remove(x.tmp))
}
