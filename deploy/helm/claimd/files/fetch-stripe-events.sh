#!/bin/sh
# Writes Stripe's events of the last SINCE_HOURS hours to OUT, every page of
# GET /v1/events (newest first, 100 a page) one after another: the file
# claimd reconcile --events reads. The init container of the chart's
# reconcile CronJob runs it (curlimages/curl); deploy/helm_test.go runs it
# against a stand-in for Stripe.
#
# STRIPE_API_KEY: a restricted key with read access to Events only; it is
# handed to curl on its standard input, never on a command line.
# TYPES: space-separated event types to list (types[], at most 20; Stripe
# takes a trailing * as in charge.*); empty lists every type.
# STRIPE_API: the API's base URL (default https://api.stripe.com).
set -eu
: "${STRIPE_API_KEY:?the Stripe API key is not set}"
api=${STRIPE_API:-https://api.stripe.com}
out=${OUT:-/events/events.json}
since=$(( $(date +%s) - ${SINCE_HOURS:-84} * 3600 ))
max_pages=${MAX_PAGES:-5000}

set -- -d limit=100 -d "created[gte]=$since"
for t in ${TYPES:-}; do
	set -- "$@" -d "types[]=$t"
done

: > "$out"
after=""
pages=0
while :; do
	page=$(printf 'user = "%s:"\n' "$STRIPE_API_KEY" |
		curl --config - --get --fail --silent --show-error --max-time 30 --retry 3 \
			"$@" ${after:+-d "starting_after=$after"} "$api/v1/events")
	printf '%s\n' "$page" >> "$out"
	pages=$((pages + 1))
	printf '%s' "$page" | grep -q '"has_more": *true' || break
	# The page's last event: Stripe lists newest first, so the next page
	# starts after it. An event's own id is the only evt_ id it carries.
	after=$(printf '%s' "$page" | grep -o '"id": *"evt_[A-Za-z0-9]*"' | tail -n 1 | sed 's/.*"\(evt_[A-Za-z0-9]*\)"/\1/')
	if [ -z "$after" ]; then
		echo "fetch-stripe-events: page $pages says has_more but holds no event id" >&2
		exit 1
	fi
	if [ "$pages" -ge "$max_pages" ]; then
		echo "fetch-stripe-events: more than $max_pages pages; lower SINCE_HOURS or list fewer TYPES" >&2
		exit 1
	fi
done
echo "fetch-stripe-events: $pages pages of events created since $(date -u -d "@$since" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo "$since") in $out" >&2
