package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

// TryClaim implements stores.Idempotency.
func (s *Store) TryClaim(ctx context.Context, r stores.ClaimRequest) (stores.Claim, error) {
	out, err := s.TryClaimBatch(ctx, []stores.ClaimRequest{r})
	if err != nil {
		return stores.Claim{}, err
	}
	return out[0], nil
}

// claimSQL claims every input key it can in one statement and, for the keys
// it could not, reports the row it found. Keys are inserted in sorted order
// so that concurrent batches lock rows in the same order and cannot
// deadlock. The row found is read from the statement's snapshot: a row that
// a concurrent transaction committed after the snapshot was taken makes the
// INSERT skip the key yet is not visible to the join, and comes back with
// neither a token nor a state; those are looked up again. The row is looked
// up per key (LATERAL ... LIMIT 1), through the primary key: a plain join
// leaves the planner free to read the whole table, which it does on tables
// of some thousands of rows (plan_test.go).
const claimSQL = `
WITH input AS (
    SELECT k.key, k.owner, k.expires_at
    FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS k(key, owner, expires_at)
), claimed AS (
    INSERT INTO acemq_idempotency AS i (key, state, token, owner, claimed_at, expires_at)
    SELECT key, 'claimed', nextval('acemq_idempotency_token'), owner, $4, expires_at
    FROM input ORDER BY key
    ON CONFLICT (key) DO UPDATE SET
        state = 'claimed', token = excluded.token, owner = excluded.owner,
        claimed_at = excluded.claimed_at, confirmed_at = NULL, expires_at = excluded.expires_at
    WHERE i.expires_at <= $4
    RETURNING i.key, i.token
)
SELECT input.key, claimed.token, cur.state, cur.owner, cur.expires_at
FROM input
LEFT JOIN claimed ON claimed.key = input.key
LEFT JOIN LATERAL (
    SELECT c.state, c.owner, c.expires_at FROM acemq_idempotency AS c
    WHERE claimed.key IS NULL AND c.key = input.key
    LIMIT 1
) AS cur ON true`

// planEachRun has the claim and confirm statements planned by the server
// for each run, for the table as it is then. Prepared once and run many
// times (pgx's default), a statement gets a generic plan after five runs,
// made for the table as it was: on a new table, taken to be ten pages, the
// confirm's read by row address costs more than reading all of them, and
// that plan was kept as the table grew to hundreds of thousands of rows,
// every confirm reading them all. Planning costs the server about a
// millisecond per batch (plan_test.go).
const planEachRun = pgx.QueryExecModeCacheDescribe

const lookSQL = `SELECT key, state, owner, expires_at FROM acemq_idempotency WHERE key = ANY($1)`

// maxClaimRounds bounds how often a key whose row vanished between the
// INSERT and the look (released or purged meanwhile) is claimed again. A
// key that vanishes that often is being worked on right now: it is
// answered IN_PROGRESS (its delivery comes round in a second and claims
// then), and the rest of the batch keeps its answers. A variable for the
// tests.
var maxClaimRounds = 5

// TryClaimBatch implements stores.Idempotency: one statement for the whole
// batch, plus a look-up only for keys a concurrent commit hid from it.
func (s *Store) TryClaimBatch(ctx context.Context, reqs []stores.ClaimRequest) (_ []stores.Claim, err error) {
	defer unavailable(&err)
	if len(reqs) == 0 {
		return nil, nil
	}
	leases, err := s.opts.Leases(reqs)
	if err != nil {
		return nil, err
	}
	firsts, firstOf := backend.Dedupe(reqs)
	out := make([]stores.Claim, len(reqs))
	todo := firsts
	for round := 0; len(todo) > 0; round++ {
		if round == maxClaimRounds {
			for _, i := range todo {
				out[i] = stores.Claim{State: stores.InProgress}
			}
			break
		}
		var err error
		todo, err = s.claimRound(ctx, reqs, leases, todo, out)
		if err != nil {
			return nil, s.releaseGranted(ctx, reqs, out, err)
		}
	}
	backend.Spread(out, firstOf)
	return out, nil
}

// releaseGranted releases the claims a failed TryClaimBatch had taken
// before it failed: each claim statement commits on its own, and the
// caller, told only of the failure, holds no token to release them with.
// Left, they would answer IN_PROGRESS to their own messages' retries until
// their lease ended. It returns err, saying so if the release failed too.
func (s *Store) releaseGranted(ctx context.Context, reqs []stores.ClaimRequest, out []stores.Claim, err error) error {
	var keys []string
	var tokens []int64
	for i, c := range out {
		if c.State == stores.Claimed {
			keys, tokens = append(keys, reqs[i].Key), append(tokens, int64(c.Token))
		}
	}
	if len(keys) == 0 {
		return err
	}
	// The failure may be ctx's own deadline: the release gets time of its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, rerr := s.pool.Exec(rctx, `
DELETE FROM acemq_idempotency AS i USING unnest($1::text[], $2::bigint[]) AS r(key, token)
WHERE i.key = r.key AND i.token = r.token AND i.state = 'claimed'`, keys, tokens); rerr != nil {
		return fmt.Errorf("%w (the %d claims it had taken could not be released either, and lapse with their lease: %v)", err, len(keys), rerr)
	}
	return err
}

// releaseTimeout bounds the release of a failed batch's claims.
const releaseTimeout = 5 * time.Second

// claimRound claims reqs[idx...] and fills out; it returns the indexes still
// undecided.
func (s *Store) claimRound(ctx context.Context, reqs []stores.ClaimRequest, leases []time.Duration, idx []int, out []stores.Claim) ([]int, error) {
	now := s.opts.Now()
	keys := make([]string, len(idx))
	owners := make([]string, len(idx))
	exps := make([]time.Time, len(idx))
	byKey := make(map[string]int, len(idx))
	for j, i := range idx {
		keys[j], owners[j], exps[j] = reqs[i].Key, reqs[i].Owner, now.Add(leases[i])
		byKey[reqs[i].Key] = i
	}
	what := claimWhat(reqs, idx)
	rows, err := s.pool.Query(ctx, claimSQL, planEachRun, keys, owners, exps, now)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var hidden []string
	for rows.Next() {
		var key string
		var tok *int64
		var state, owner *string
		var exp *time.Time
		if err := rows.Scan(&key, &tok, &state, &owner, &exp); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		i := byKey[key]
		switch {
		case tok != nil:
			out[i] = stores.Claim{State: stores.Claimed, Token: stores.Token(*tok), Owner: reqs[i].Owner, ExpiresAt: now.Add(leases[i])}
		case state != nil:
			out[i] = answer(*state, *owner, *exp)
		default:
			hidden = append(hidden, key)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(hidden) == 0 {
		return nil, nil
	}
	// Look for the rows with a fresh snapshot.
	rows, err = s.pool.Query(ctx, lookSQL, hidden)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	found := map[string]bool{}
	for rows.Next() {
		var key, state, owner string
		var exp time.Time
		if err := rows.Scan(&key, &state, &owner, &exp); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out[byKey[key]] = answer(state, owner, exp)
		found[key] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var again []int
	for _, k := range hidden {
		if !found[k] {
			again = append(again, byKey[k])
		}
	}
	return again, nil
}

// answer is what a claimant that could not claim is told about the row it
// found. A row that is there and was not taken over is live: confirmed, or
// held by someone else.
func answer(state, owner string, exp time.Time) stores.Claim {
	c := stores.Claim{State: stores.InProgress, Owner: owner, ExpiresAt: exp}
	if state == "confirmed" {
		c.State = stores.AlreadyConfirmed
	}
	return c
}

func claimWhat(reqs []stores.ClaimRequest, idx []int) string {
	if len(idx) == 1 {
		return fmt.Sprintf("claim idempotency key %q", reqs[idx[0]].Key)
	}
	return fmt.Sprintf("claim batch of %d idempotency keys", len(idx))
}

// Confirm implements stores.Idempotency.
func (s *Store) Confirm(ctx context.Context, key string, token stores.Token) error {
	refused, err := s.ConfirmBatch(ctx, []stores.Held{{Key: key, Token: token}})
	if err != nil {
		return err
	}
	return refused[0]
}

// confirmSQL locks the rows it confirms in key order first, so that two
// batches confirming overlapping keys (possible after a takeover) wait for
// each other instead of deadlocking: an UPDATE ... FROM locks rows in
// whatever order its join produces them. Each row is locked by its own
// primary-key lookup, walking the keys sorted, and then updated by the
// physical address the lock returned (ctid, stable while the row is locked),
// so that neither step can become a read of the whole table (plan_test.go);
// naming the keys instead lets the planner read the whole table when the
// table has no statistics yet. A row that another confirm of the same claim
// committed while this one waited for its lock is a version the statement's
// snapshot does not see: it is not updated, and ConfirmBatch counts it done.
const confirmSQL = `
WITH c AS (
    SELECT DISTINCT key, token FROM unnest($1::text[], $2::bigint[]) AS c(key, token)
), locked AS MATERIALIZED (
    SELECT l.tid FROM (SELECT key, token FROM c ORDER BY key) AS o
    CROSS JOIN LATERAL (
        SELECT i.ctid AS tid FROM acemq_idempotency AS i
        WHERE i.key = o.key AND i.token = o.token
        FOR UPDATE
    ) AS l
)
UPDATE acemq_idempotency AS i SET
    confirmed_at = coalesce(i.confirmed_at, $3),
    expires_at = CASE WHEN i.state = 'claimed' THEN $4 ELSE i.expires_at END,
    state = 'confirmed'
WHERE i.ctid = ANY(ARRAY(SELECT tid FROM locked))
RETURNING i.key, i.token`

// ConfirmBatch implements stores.Idempotency: one statement, plus a look-up
// only to explain refusals.
func (s *Store) ConfirmBatch(ctx context.Context, held []stores.Held) (_ []error, err error) {
	defer unavailable(&err)
	if len(held) == 0 {
		return nil, nil
	}
	what := fmt.Sprintf("confirm idempotency key %q", held[0].Key)
	if len(held) > 1 {
		what = fmt.Sprintf("confirm batch of %d idempotency keys", len(held))
	}
	now := s.opts.Now()
	keys := make([]string, len(held))
	tokens := make([]int64, len(held))
	for i, h := range held {
		keys[i], tokens[i] = h.Key, int64(h.Token)
	}
	rows, err := s.pool.Query(ctx, confirmSQL, planEachRun, keys, tokens, now, now.Add(s.opts.Retention))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stores.Held])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	ok := make(map[stores.Held]bool, len(done))
	for _, h := range done {
		ok[h] = true
	}
	refused := make([]error, len(held))
	var missing []string
	for _, h := range held {
		if !ok[h] {
			missing = append(missing, h.Key)
		}
	}
	if len(missing) == 0 {
		return refused, nil
	}
	cur, err := s.current(ctx, missing)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	for i, h := range held {
		if ok[h] {
			continue
		}
		if r, found := cur[h.Key]; found && r.token == h.Token && r.confirmed {
			// Another confirm of the same claim committed first.
			continue
		}
		refused[i] = cur.stale(h)
	}
	return refused, nil
}

type row struct {
	token     stores.Token
	confirmed bool
}

type rowsByKey map[string]row

func (m rowsByKey) stale(h stores.Held) error {
	r, ok := m[h.Key]
	if !ok {
		return backend.Stale(h.Key, h.Token, 0, false)
	}
	return backend.Stale(h.Key, h.Token, r.token, r.confirmed)
}

func (s *Store) current(ctx context.Context, keys []string) (rowsByKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, token, state = 'confirmed' FROM acemq_idempotency WHERE key = ANY($1)`, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := rowsByKey{}
	for rows.Next() {
		var key string
		var r row
		if err := rows.Scan(&key, &r.token, &r.confirmed); err != nil {
			return nil, err
		}
		m[key] = r
	}
	return m, rows.Err()
}

// Release implements stores.Idempotency.
func (s *Store) Release(ctx context.Context, key string, token stores.Token) (err error) {
	defer unavailable(&err)
	tag, err := s.pool.Exec(ctx, `DELETE FROM acemq_idempotency WHERE key = $1 AND token = $2 AND state = 'claimed'`, key, int64(token))
	if err != nil {
		return fmt.Errorf("release idempotency key %q: %w", key, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	cur, err := s.current(ctx, []string{key})
	if err != nil {
		return fmt.Errorf("release idempotency key %q: %w", key, err)
	}
	return cur.stale(stores.Held{Key: key, Token: token})
}

// purgeExpiredSQL deletes at most $2 rows expired at $1. It takes each
// row's lock before deleting it and skips rows locked by someone else:
// claims and confirms lock their rows in key order, and may be taking over
// or confirming the very rows the purge deletes, so a purge that waited for
// them, in the order of the index it reads, deadlocked with them (one of
// them aborted, often the whole purge). A row skipped is being claimed or
// confirmed, and is gone or no longer expired once that commits; if not,
// the next purge takes it.
const purgeExpiredSQL = `
DELETE FROM acemq_idempotency WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM acemq_idempotency WHERE expires_at <= $1
    LIMIT $2 FOR UPDATE SKIP LOCKED))`

// PurgeExpired implements stores.Idempotency, in batches of backend.PurgeBatch
// rows (so that a large purge holds its locks and its transaction briefly,
// batch after batch) that never wait for a claim or a confirm.
func (s *Store) PurgeExpired(ctx context.Context) (int64, error) {
	return backend.PurgeInBatches(func(limit int, purged int64) (int64, error) {
		tag, err := s.pool.Exec(ctx, purgeExpiredSQL, s.opts.Now(), limit)
		if err != nil {
			return 0, fmt.Errorf("purge expired idempotency rows (%d purged before the failure): %w", purged, err)
		}
		return tag.RowsAffected(), nil
	})
}
