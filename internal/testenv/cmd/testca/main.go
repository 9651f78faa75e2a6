// Command testca makes a throwaway CA and certificates for the test suites
// of claimd's non-Go clients, with internal/testenv/testcert (crypto/x509, no
// openssl). It prints where it wrote them as one JSON object:
//
//	testca -dir DIR -leaf server=claimd,127.0.0.1,localhost -leaf client=spiffe://claimd.test/receiver
//	{"ca":"DIR/ca.pem","leaves":{"server":{"cert":"DIR/leaf1.pem","key":"DIR/leaf1.key"},…}}
//
// Each -leaf is NAME=NAMES: NAMES as testcert.CA.Issue takes them (the first
// is the common name; IP addresses, spiffe:// URIs and DNS names become
// SANs). The certificates are valid from an hour ago for a day.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/claimd/claimd/internal/testenv/testcert"
)

type leafFlag []string

func (l *leafFlag) String() string     { return strings.Join(*l, " ") }
func (l *leafFlag) Set(v string) error { *l = append(*l, v); return nil }

type files struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testca:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("testca", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory to write the PEM files in (created if missing)")
	name := fs.String("name", "claimd test CA", "the CA's common name")
	var leaves leafFlag
	fs.Var(&leaves, "leaf", "NAME=CN[,SAN…]: a certificate to issue; repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	ca, err := testcert.CreateCA(*dir, *name)
	if err != nil {
		return err
	}
	out := struct {
		CA     string           `json:"ca"`
		Leaves map[string]files `json:"leaves"`
	}{CA: ca.File(), Leaves: map[string]files{}}
	for _, l := range leaves {
		key, names, ok := strings.Cut(l, "=")
		if !ok || key == "" || names == "" {
			return fmt.Errorf("-leaf %q: want NAME=CN[,SAN…]", l)
		}
		leaf, err := ca.IssueLeaf(strings.Split(names, ",")...)
		if err != nil {
			return fmt.Errorf("-leaf %s: %w", key, err)
		}
		out.Leaves[key] = files{Cert: leaf.CertFile, Key: leaf.KeyFile}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
