// Package effects holds the DDL of the effect fence: the table
// claimd_effects that the guards create in the handler's own database
// (clients/GUARD.md, "Exactly-once effects"), in each SQL dialect, for
// `claimd effects-schema` and the migration tools of teams that run it
// themselves.
//
// The statements are byte for byte those of
// clients/guardspec/scenarios.json (effects.schema), which every guard
// executes on first use; a test compares them, so that the server and the
// guards cannot drift. claimd itself never connects to that database.
package effects

import (
	"embed"
	"fmt"
	"strings"
)

// schemaFS holds one statement per dialect, schema/<dialect>.sql, each
// ending in ";\n" so that the file is a valid script of its own.
//
//go:embed schema/*.sql
var schemaFS embed.FS

// Dialects returns the dialects Schema knows, in the order the CLI names
// them.
func Dialects() []string { return []string{"postgres", "sqlite", "mysql"} }

// UnknownDialectError is Schema's answer for a dialect it does not know.
type UnknownDialectError struct{ Dialect string }

func (e *UnknownDialectError) Error() string {
	return fmt.Sprintf("effects: unknown dialect %q, want one of %s", e.Dialect, strings.Join(Dialects(), ", "))
}

// Schema returns the CREATE TABLE IF NOT EXISTS statement of claimd_effects
// in dialect, without a terminating semicolon, exactly as the guards
// execute it; a *UnknownDialectError for a dialect not in Dialects.
func Schema(dialect string) (string, error) {
	for _, d := range Dialects() {
		if d != dialect {
			continue
		}
		b, err := schemaFS.ReadFile("schema/" + d + ".sql")
		if err != nil {
			return "", err // a file of Dialects missing from the build: TestSchemaMatchesScenarios fails first
		}
		return strings.TrimSuffix(string(b), ";\n"), nil
	}
	return "", &UnknownDialectError{Dialect: dialect}
}
