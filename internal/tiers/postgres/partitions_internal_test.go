package postgres

import (
	"testing"
	"time"
)

func TestPartitionNames(t *testing.T) {
	tests := []struct {
		desc  string
		name  string
		month time.Time
		ok    bool
	}{
		{"january", "audit_log_y2026m01", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"december", "audit_log_y2026m12", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), true},
		{"month 13", "audit_log_y2026m13", time.Time{}, false},
		{"month 0", "audit_log_y2026m00", time.Time{}, false},
		{"other table", "audit_log_archive", time.Time{}, false},
		{"short", "audit_log_y2026m1", time.Time{}, false},
		{"not a number", "audit_log_y20x6m01", time.Time{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			month, ok := parsePartitionName(tc.name)
			if ok != tc.ok || !month.Equal(tc.month) {
				t.Fatalf("parsePartitionName(%q) = %v, %v; want %v, %v", tc.name, month, ok, tc.month, tc.ok)
			}
			if ok && partitionName(month) != tc.name {
				t.Fatalf("partitionName(%v) = %q, want %q", month, partitionName(month), tc.name)
			}
		})
	}
}

func TestMonthStartIsUTC(t *testing.T) {
	// 00:30 on the 1st in UTC+2 is still the previous month in UTC.
	at := time.Date(2026, 12, 1, 0, 30, 0, 0, time.FixedZone("UTC+2", 2*3600))
	if got, want := monthStart(at), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("monthStart(%v) = %v, want %v", at, got, want)
	}
}
