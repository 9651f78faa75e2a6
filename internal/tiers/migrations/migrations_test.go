package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	tests := []struct {
		desc    string
		files   []string
		want    []string
		wantErr string
	}{
		{desc: "in version order", files: []string{"0002_b.sql", "0001_a.sql"}, want: []string{"0001_a", "0002_b"}},
		{desc: "a gap", files: []string{"0001_a.sql", "0003_c.sql"}, wantErr: "version 3, want 2"},
		{desc: "a repeat", files: []string{"0001_a.sql", "0001_b.sql"}, wantErr: "want 2"},
		{desc: "a bad name", files: []string{"init.sql"}, wantErr: "NNNN_name.sql"},
		{desc: "none", files: nil, wantErr: "no migrations"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tc.files {
				fsys["m/"+f] = &fstest.MapFile{Data: []byte("-- " + f)}
			}
			ms, err := Load(fsys, "m")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load(%v) error = %v, want %q", tc.files, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, m := range ms {
				got = append(got, m.Name)
				if m.Version != i+1 || m.SQL != "-- "+m.Name+".sql" {
					t.Errorf("Load(%v)[%d] = %+v", tc.files, i, m)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("Load(%v) = %v, want %v", tc.files, got, tc.want)
			}
		})
	}
}

func TestResultString(t *testing.T) {
	a, b := Migration{Version: 1, Name: "0001_claims"}, Migration{Version: 2, Name: "0002_audit"}
	tests := []struct {
		desc string
		r    Result
		want string
	}{
		{"nothing to do", Result{Version: 2}, "up to date at version 2"},
		{"a fresh database", Result{Applied: []Migration{a, b}, Version: 2}, "applied 0001_claims, 0002_audit; now at version 2"},
		{"one pending", Result{Applied: []Migration{b}, Version: 2}, "applied 0002_audit; now at version 2"},
		{"taken over", Result{Adopted: []int{1, 2}, Version: 2}, "took over versions 1, 2 recorded in schema_migrations by claimd 0.1; up to date at version 2"},
	}
	for _, tc := range tests {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%s: Result.String() = %q, want %q", tc.desc, got, tc.want)
		}
	}
}
