package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// recoveredSeries is claimd's count of settles that carried
// effect_recovered, for the receivers' provider (clients/GUARD.md, row 23).
const recoveredSeries = `claimd_effects_recovered_total{provider="stripe"}`

// recoveredCount reads recoveredSeries from claimd's /metrics.
func recoveredCount(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseSeries(resp.Body, recoveredSeries)
}

// parseSeries finds one series' value in Prometheus's text format.
func parseSeries(r io.Reader, series string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), series+" ")
		if !ok {
			continue
		}
		return strconv.ParseFloat(strings.Fields(rest)[0], 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no series %s", series)
}

// recoveredSettles counts the answers a recovered settle gave: 200 with
// done, each one Transition with effect_recovered that claimd recorded.
func recoveredSettles(events []event) int {
	n := 0
	for _, e := range events {
		for _, as := range e.Answers {
			for _, a := range as {
				if a.Status == 200 && a.Done {
					n++
				}
			}
		}
	}
	return n
}
