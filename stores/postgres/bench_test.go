package postgres_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/acemq/acemq-flow/stores"
	"github.com/acemq/acemq-flow/stores/storetest"
)

// BenchmarkClaimConfirm compares claiming and confirming keys one round trip
// at a time against batches of the size a consumer with that many deliveries
// in flight would send, with 16 concurrent callers as under load. The figure
// to read is keys/s.
func BenchmarkClaimConfirm(b *testing.B) {
	for _, batch := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := storetest.OpenPostgres(b, stores.Options{})
			const callers = 16
			var n int
			b.ResetTimer()
			for b.Loop() {
				var wg sync.WaitGroup
				for c := range callers {
					round := n
					wg.Go(func() {
						reqs := make([]stores.ClaimRequest, batch)
						for i := range reqs {
							reqs[i] = stores.ClaimRequest{Key: fmt.Sprintf("r%d-c%d-k%d", round, c, i)}
						}
						out, err := s.TryClaimBatch(b.Context(), reqs)
						if err != nil {
							b.Error(err)
							return
						}
						held := make([]stores.Held, len(out))
						for i, o := range out {
							held[i] = stores.Held{Key: reqs[i].Key, Token: o.Token}
						}
						refused, err := s.ConfirmBatch(b.Context(), held)
						if err != nil {
							b.Error(err)
							return
						}
						for _, r := range refused {
							if r != nil {
								b.Error(r)
							}
						}
					})
				}
				wg.Wait()
				n++
			}
			b.ReportMetric(float64(n*callers*batch)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
