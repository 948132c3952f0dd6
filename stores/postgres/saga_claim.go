package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/internal/backend"
)

var _ stores.SagaClaims = (*Store)(nil)

// instColumns are sagaColumns as the lateral read of sagaClaimSQL names
// them.
var instColumns = "inst." + strings.ReplaceAll(sagaColumns, ", ", ", inst.")

// sagaClaimSQL is claimSQL with each key's instance read in the same
// statement, and so from the same snapshot as the answer it reports for a
// row it did not claim: a confirmed claim's instance has what the
// advance before its confirm wrote, and a claim taken has the
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
