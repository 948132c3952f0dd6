package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.SagaClaims = (*Store)(nil)

// instColumns are sagaColumns as the lateral read of sagaClaimSQL names
// them.
var instColumns = "inst." + strings.ReplaceAll(sagaColumns, ", ", ", inst.")

// sagaClaimSQL is claimSQL with each key's instance read in the same
// statement, and so from the same snapshot as the answer it reports for a
// row it did not claim: a confirmed claim's instance has what its confirm
// was committed with (AdvanceSagaConfirmBatch), and a claim taken has the
// instance as every earlier delivery of the message left it (each commits
// its advance before it is acknowledged). An in-progress answer reads no
// instance: its delivery comes round again.
var sagaClaimSQL = `
WITH input AS (
    SELECT k.key, k.owner, k.expires_at, k.instance
    FROM unnest($1::text[], $2::text[], $3::timestamptz[], $5::text[]) AS k(key, owner, expires_at, instance)
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
SELECT input.key, claimed.token, cur.state, cur.owner, cur.expires_at, ` + instColumns + `
FROM input
LEFT JOIN claimed ON claimed.key = input.key
LEFT JOIN LATERAL (
    SELECT c.state, c.owner, c.expires_at FROM acemq_idempotency AS c
    WHERE claimed.key IS NULL AND c.key = input.key
    LIMIT 1
) AS cur ON true
LEFT JOIN LATERAL (
    SELECT ` + sagaColumns + ` FROM acemq_sagas AS a
    WHERE a.id = input.instance AND (claimed.key IS NOT NULL OR cur.state = 'confirmed')
    LIMIT 1
) AS inst ON true`

// sagaLookSQL is lookSQL with the instance of each confirmed key, from the
// same fresh snapshot.
var sagaLookSQL = `
SELECT c.key, c.state, c.owner, c.expires_at, ` + instColumns + `
FROM unnest($1::text[], $2::text[]) AS k(key, instance)
JOIN acemq_idempotency AS c ON c.key = k.key
LEFT JOIN LATERAL (
    SELECT ` + sagaColumns + ` FROM acemq_sagas AS a
    WHERE a.id = k.instance AND c.state = 'confirmed'
    LIMIT 1
) AS inst ON true`

// ClaimSagaBatch implements stores.SagaClaims: one statement for the whole
// batch, claims and instances, plus a look-up only for keys a concurrent
// commit hid from it (as TryClaimBatch).
func (s *Store) ClaimSagaBatch(ctx context.Context, reqs []stores.SagaClaimRequest) (_ []stores.SagaClaim, err error) {
	defer unavailable(&err)
	if len(reqs) == 0 {
		return nil, nil
	}
	claims := make([]stores.ClaimRequest, len(reqs))
	for i, r := range reqs {
		claims[i] = r.ClaimRequest
	}
	leases, err := s.opts.Leases(claims)
	if err != nil {
		return nil, err
	}
	firsts, firstOf := backend.Dedupe(claims)
	answers := make([]stores.Claim, len(reqs))
	out := make([]stores.SagaClaim, len(reqs))
	todo := firsts
	for round := 0; len(todo) > 0; round++ {
		if round == maxClaimRounds {
			for _, i := range todo {
				answers[i] = stores.Claim{State: stores.InProgress}
			}
			break
		}
		var err error
		todo, err = s.sagaClaimRound(ctx, reqs, leases, todo, answers, out)
		if err != nil {
			return nil, s.releaseGranted(ctx, claims, answers, err)
		}
	}
	backend.Spread(answers, firstOf)
	for i, j := range firstOf {
		out[i].Claim = answers[i]
		if i != j {
			out[i].Instance, out[i].Found = out[j].Instance, out[j].Found
		}
	}
	return out, nil
}

// sagaClaimRound claims reqs[idx...], filling answers and the instances of
// out; it returns the indexes still undecided.
func (s *Store) sagaClaimRound(ctx context.Context, reqs []stores.SagaClaimRequest, leases []time.Duration, idx []int, answers []stores.Claim, out []stores.SagaClaim) ([]int, error) {
	now := s.opts.Now()
	n := len(idx)
	keys, owners, instances, exps := make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	byKey := make(map[string]int, n)
	claims := make([]stores.ClaimRequest, len(reqs))
	for j, i := range idx {
		keys[j], owners[j], instances[j], exps[j] = reqs[i].Key, reqs[i].Owner, reqs[i].Instance, now.Add(leases[i])
		byKey[reqs[i].Key] = i
	}
	for i, r := range reqs {
		claims[i] = r.ClaimRequest
	}
	what := "saga " + claimWhat(claims, idx)
	rows, err := s.pool.Query(ctx, sagaClaimSQL, planEachRun, keys, owners, exps, now, instances)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var hidden []string
	for rows.Next() {
		var (
			key          string
			tok          *int64
			state, owner *string
			exp          *time.Time
			inst         nullSaga
		)
		if err := rows.Scan(append([]any{&key, &tok, &state, &owner, &exp}, inst.targets()...)...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		i := byKey[key]
		switch {
		case tok != nil:
			answers[i] = stores.Claim{State: stores.Claimed, Token: stores.Token(*tok), Owner: reqs[i].Owner, ExpiresAt: now.Add(leases[i])}
		case state != nil:
			answers[i] = answer(*state, *owner, *exp)
		default:
			hidden = append(hidden, key)
			continue
		}
		if out[i].Instance, out[i].Found, err = inst.instance(); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(hidden) == 0 {
		return nil, nil
	}
	// Look for the rows, and their instances, with a fresh snapshot.
	hiddenInst := make([]string, len(hidden))
	for j, k := range hidden {
		hiddenInst[j] = reqs[byKey[k]].Instance
	}
	rows, err = s.pool.Query(ctx, sagaLookSQL, hidden, hiddenInst)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	found := map[string]bool{}
	for rows.Next() {
		var (
			key, state, owner string
			exp               time.Time
			inst              nullSaga
		)
		if err := rows.Scan(append([]any{&key, &state, &owner, &exp}, inst.targets()...)...); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		i := byKey[key]
		answers[i] = answer(state, owner, exp)
		if out[i].Instance, out[i].Found, err = inst.instance(); err != nil {
			rows.Close()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
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

// nullSaga is a row of sagaColumns that a LEFT JOIN may leave NULL.
type nullSaga struct {
	id, saga, state, replyTo, corr, steps *string
	step                                  *int32
	input                                 []byte
	version                               *int64
	started, updated, ended               *time.Time
}

func (n *nullSaga) targets() []any {
	return []any{&n.id, &n.saga, &n.state, &n.step, &n.input, &n.replyTo, &n.corr, &n.steps, &n.version, &n.started, &n.updated, &n.ended}
}

// instance is the row read, ok false for none.
func (n *nullSaga) instance() (stores.SagaInstance, bool, error) {
	if n.id == nil {
		return stores.SagaInstance{}, false, nil
	}
	inst := stores.SagaInstance{ID: *n.id, Saga: *n.saga, State: stores.SagaState(*n.state), Step: int(*n.step),
		ReplyTo: *n.replyTo, CorrelationID: *n.corr, Version: *n.version, StartedAt: n.started.UTC(), UpdatedAt: n.updated.UTC()}
	if len(n.input) > 0 {
		inst.Input = n.input
	}
	if n.ended != nil {
		inst.EndedAt = n.ended.UTC()
	}
	var err error
	if inst.Steps, err = backend.DecodeSagaSteps(inst.ID, []byte(*n.steps)); err != nil {
		return stores.SagaInstance{}, false, err
	}
	return inst, true, nil
}

// advanceConfirmSQL is advanceSQL with, in the same statement and so the
// same commit, the confirm (as confirmSQL) of each claim whose instance it
// advanced: a claim whose instance's version was stale is not confirmed.
// The rows of acemq_sagas are locked in id order before any claim's row,
// and a claim's row only after its own instance's: a claim belongs to one
// instance, so two of these statements never wait for each other on a
// claim, and claims and confirms, which lock only claims, never wait on an
// instance. A claim taken over (its token no longer the one presented) is
// left alone, and its instance's advance stands.
const advanceConfirmSQL = `
WITH u AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::integer[], $5::text[], $6::text[], $7::jsonb[], $8::timestamptz[], $10::text[], $11::bigint[])
        AS u(id, version, state, step, reply_to, correlation_id, steps, ended_at, key, token)
), locked AS MATERIALIZED (
    SELECT l.tid, o.* FROM (SELECT * FROM u ORDER BY id) AS o
    CROSS JOIN LATERAL (
        SELECT a.ctid AS tid FROM acemq_sagas AS a
        WHERE a.id = o.id AND a.version = o.version AND a.ended_at IS NULL
        FOR UPDATE
    ) AS l
), advanced AS (
    UPDATE acemq_sagas AS a SET state = l.state, step = l.step, reply_to = l.reply_to, correlation_id = l.correlation_id,
        steps = l.steps, version = a.version + 1, updated_at = $9, ended_at = l.ended_at
    FROM locked AS l
    WHERE a.ctid = ANY(ARRAY(SELECT tid FROM locked)) AND a.ctid = l.tid
    RETURNING a.id, l.key, l.token
), held AS MATERIALIZED (
    SELECT h.tid FROM (SELECT DISTINCT key, token FROM advanced WHERE token <> 0 ORDER BY key) AS o
    CROSS JOIN LATERAL (
        SELECT i.ctid AS tid FROM acemq_idempotency AS i
        WHERE i.key = o.key AND i.token = o.token
        FOR UPDATE
    ) AS h
), confirmed AS (
    UPDATE acemq_idempotency AS i SET
        confirmed_at = coalesce(i.confirmed_at, $12),
        expires_at = CASE WHEN i.state = 'claimed' THEN $13 ELSE i.expires_at END,
        state = 'confirmed'
    WHERE i.ctid = ANY(ARRAY(SELECT tid FROM held))
    RETURNING i.key
)
SELECT id, '' FROM advanced
UNION ALL
SELECT '', key FROM confirmed`

// AdvanceSagaConfirmBatch implements stores.SagaClaims: one statement a
// round, each round at most one write of each instance (as
// AdvanceSagaBatch), plus look-ups only to explain refusals.
func (s *Store) AdvanceSagaConfirmBatch(ctx context.Context, advs []stores.SagaAdvance) (_ []stores.SagaAdvanced, err error) {
	defer unavailable(&err)
	out := make([]stores.SagaAdvanced, len(advs))
	todo := make([]int, 0, len(advs))
	for i, a := range advs {
		if err := stores.CheckSagaInstance(a.Instance); err != nil {
			out[i].Refused = err
			continue
		}
		todo = append(todo, i)
	}
	for len(todo) > 0 {
		seen := make(map[string]bool, len(todo))
		var now, later []int
		for _, i := range todo {
			if seen[advs[i].Instance.ID] {
				later = append(later, i)
				continue
			}
			seen[advs[i].Instance.ID] = true
			now = append(now, i)
		}
		if err := s.advanceConfirmRound(ctx, advs, now, out); err != nil {
			return nil, err
		}
		todo = later
	}
	return out, nil
}

func (s *Store) advanceConfirmRound(ctx context.Context, advs []stores.SagaAdvance, idx []int, out []stores.SagaAdvanced) error {
	first := advs[idx[0]].Instance
	what := fmt.Sprintf("saga %q: advance instance %q from version %d and confirm its claim", first.Saga, first.ID, first.Version)
	if len(idx) > 1 {
		what = fmt.Sprintf("advance a batch of %d saga instances and confirm their claims", len(idx))
	}
	n := len(idx)
	ids, states, replyTo, corr, steps, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, tokens, step := make([]int64, n), make([]int64, n), make([]int32, n)
	ended := make([]*time.Time, n)
	clock := s.opts.Now()
	now := backend.SagaTime(clock)
	for j, i := range idx {
		inst := advs[i].Instance
		b, err := backend.EncodeSagaSteps(inst)
		if err != nil {
			return err
		}
		ids[j], versions[j], states[j], step[j], replyTo[j], corr[j], steps[j] = inst.ID, inst.Version, string(inst.State), int32(inst.Step), inst.ReplyTo, inst.CorrelationID, string(b)
		keys[j], tokens[j] = advs[i].Confirm.Key, int64(advs[i].Confirm.Token)
		if inst.State.Ended() {
			ended[j] = &now
		}
	}
	rows, err := s.pool.Query(ctx, advanceConfirmSQL, planEachRun, ids, versions, states, step, replyTo, corr, steps, ended, now,
		keys, tokens, clock, clock.Add(s.opts.Retention))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	advanced, confirmed := map[string]bool{}, map[string]bool{}
	for rows.Next() {
		var id, key string
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return fmt.Errorf("%s: %w", what, err)
		}
		if id != "" {
			advanced[id] = true
		} else {
			confirmed[key] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var stale, unconfirmed []string
	for _, i := range idx {
		a := advs[i]
		switch {
		case !advanced[a.Instance.ID]:
			stale = append(stale, a.Instance.ID)
		case a.Confirm.Token != 0 && !confirmed[a.Confirm.Key]:
			unconfirmed = append(unconfirmed, a.Confirm.Key)
		}
	}
	if len(stale) > 0 {
		current, err := s.sagaVersions(ctx, stale)
		if err != nil {
			return fmt.Errorf("%s: read the current versions: %w", what, err)
		}
		for _, i := range idx {
			if !advanced[advs[i].Instance.ID] {
				out[i].Refused = backend.StaleSaga(advs[i].Instance, current[advs[i].Instance.ID])
			}
		}
	}
	if len(unconfirmed) > 0 {
		cur, err := s.current(ctx, unconfirmed)
		if err != nil {
			return fmt.Errorf("%s: read the claims not confirmed: %w", what, err)
		}
		for _, i := range idx {
			h := advs[i].Confirm
			if !advanced[advs[i].Instance.ID] || h.Token == 0 || confirmed[h.Key] {
				continue
			}
			if r, found := cur[h.Key]; found && r.token == h.Token && r.confirmed {
				continue // another confirm of the same claim committed first
			}
			out[i].Unconfirmed = cur.stale(h)
		}
	}
	return nil
}

// sagaVersions reads the versions of the instances ids name; one the store
// does not have is absent (no row is version 0).
func (s *Store) sagaVersions(ctx context.Context, ids []string) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, version FROM acemq_sagas WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	type idVersion struct {
		ID      string
		Version int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[idVersion])
	if err != nil {
		return nil, err
	}
	current := make(map[string]int64, len(got))
	for _, r := range got {
		current[r.ID] = r.Version
	}
	return current, nil
}
