package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/claimd/claimd/internal/effects"
	"github.com/claimd/claimd/internal/textclip"
)

// dialectList names the dialects effects-schema knows: "postgres, sqlite
// or mysql".
func dialectList() string {
	ds := effects.Dialects()
	return strings.Join(ds[:len(ds)-1], ", ") + " or " + ds[len(ds)-1]
}

func bindEffectsSchema(fs *flag.FlagSet, dialect *string) {
	fs.StringVar(dialect, "dialect", "", "the SQL `DIALECT` of the handler's database: "+dialectList())
}

// runEffectsSchema prints the DDL of claimd_effects, the effect fence the
// guards create in the handler's own database on first use, for teams that
// create it with their own migration tool. It is the statement the guards
// run (clients/guardspec/scenarios.json, effects.schema), with its ";".
func runEffectsSchema(_ context.Context, args []string, stdout, _ io.Writer) error {
	var dialect string
	fs := newFlagSet("effects-schema")
	bindEffectsSchema(fs, &dialect)
	if err := parse(fs, args); err != nil {
		return err
	}
	if dialect == "" {
		return fmt.Errorf("%w: effects-schema: --dialect is required: %s", errUsage, dialectList())
	}
	ddl, err := effects.Schema(dialect)
	if ue := (*effects.UnknownDialectError)(nil); errors.As(err, &ue) {
		return fmt.Errorf("%w: effects-schema: --dialect %s: want %s", errUsage, textclip.Quote(dialect, maxEcho), dialectList())
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(stdout, ddl+";\n")
	return err
}
