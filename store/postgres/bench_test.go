package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"geohub/app"
	"geohub/store/postgres"
	"geohub/store/storetest"
)

// BenchmarkAppend measures Append on PostgreSQL beside the server's own
// raw INSERT rate into the same table on the same machine, the ceiling:
//
//	go test -run '^$' -bench . -benchtime 3s ./store/postgres
//
// Arms (b.N is the total of events, spread over the publishers):
//
//	append-N               Append of one event by N concurrent publishers (group commit)
//	append-outbox-N        the same, each event with one delivery in an aggregate of two
//	                       (owner look-up and per-aggregate sequence: the enqueue work)
//	append-outbox-3x32     the same on three replicas of one database, 32 publishers each:
//	                       their group commits take turns at log_head's lock
//	raw-autocommit-N       N connections, each INSERTing one row per transaction
//	raw-batched-64         one connection, 64 INSERTs per transaction, pipelined
//
// It only reports; nothing asserts on timing.
func BenchmarkAppend(b *testing.B) {
	payload := benchPayload()
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("append-%d", n), func(b *testing.B) {
			db := open(b, freshDatabase(b))
			ctx := context.Background()
			benchSpread(b, n, func() error {
				ev := storetest.NewEvent("jornada:iniciada")
				ev.Agregado, ev.Payload = "jornada:"+ev.EventID, payload
				_, err := db.Append(ctx, []app.Pending{{Event: ev}})
				return err
			})
		})
	}
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("append-outbox-%d", n), func(b *testing.B) {
			db := open(b, freshDatabase(b))
			ctx := context.Background()
			in := storetest.NewIntegrator("int-1", time.Now())
			if err := db.InsertIntegrator(ctx, in, []byte("s"), "hash-1", nil); err != nil {
				b.Fatal(err)
			}
			var k atomic.Int64
			benchSpread(b, n, func() error {
				ev := storetest.NewEvent("jornada:iniciada")
				ev.Agregado, ev.Payload = fmt.Sprintf("jornada:%d", k.Add(1)/2), payload
				out := &app.Outbox{Body: payload, Agregado: ev.Agregado, Claim: "int-1", NeedsOwner: true,
					Recipients: func(owner string) []string { return []string{owner} }}
				_, err := db.Append(ctx, []app.Pending{{Event: ev, Outbox: out}})
				return err
			})
		})
	}
	b.Run("append-outbox-3x32", func(b *testing.B) {
		url := freshDatabase(b)
		replicas := []*postgres.DB{open(b, url), open(b, url), open(b, url)}
		ctx := context.Background()
		in := storetest.NewIntegrator("int-1", time.Now())
		if err := replicas[0].InsertIntegrator(ctx, in, []byte("s"), "hash-1", nil); err != nil {
			b.Fatal(err)
		}
		var k atomic.Int64
		benchSpread(b, 96, func() error {
			n := k.Add(1)
			ev := storetest.NewEvent("jornada:iniciada")
			ev.Agregado, ev.Payload = fmt.Sprintf("jornada:%d", n/2), payload
			out := &app.Outbox{Body: payload, Agregado: ev.Agregado, Claim: "int-1", NeedsOwner: true,
				Recipients: func(owner string) []string { return []string{owner} }}
			_, err := replicas[n%3].Append(ctx, []app.Pending{{Event: ev, Outbox: out}})
			return err
		})
	})
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("raw-autocommit-%d", n), func(b *testing.B) {
			url := freshDatabase(b)
			open(b, url).Close() // the same table and indexes
			conns := make(chan *pgx.Conn, n)
			for range n {
				c := raw(b, url)
				benchPrepare(b, c)
				conns <- c
			}
			benchSpread(b, n, func() error {
				c := <-conns
				defer func() { conns <- c }()
				_, err := c.Exec(context.Background(), "ins", benchRow(payload)...)
				return err
			})
		})
	}
	b.Run("raw-batched-64", func(b *testing.B) {
		url := freshDatabase(b)
		open(b, url).Close()
		c := raw(b, url)
		benchPrepare(b, c)
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for done := 0; done < b.N; {
			batch := &pgx.Batch{}
			batch.Queue("BEGIN")
			for k := 0; k < 64 && done < b.N; k, done = k+1, done+1 {
				batch.Queue("ins", benchRow(payload)...)
			}
			batch.Queue("COMMIT")
			if err := c.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
	})
}

// benchSpread runs b.N calls of op over workers goroutines and reports
// the rate from the wall time.
func benchSpread(b *testing.B, workers int, op func() error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
}

// benchPrepare prepares the raw insert on c. Its sequence numbers come
// from a plain PostgreSQL sequence: the raw arms are the ceiling, without
// the commit order Append keeps.
func benchPrepare(b *testing.B, c *pgx.Conn) {
	ctx := context.Background()
	if _, err := c.Exec(ctx, "CREATE SEQUENCE IF NOT EXISTS bench_seq"); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Prepare(ctx, "ins", `INSERT INTO event_log (sequence_number, event_id, tipo, versao_schema,
		timestamp, origem, correlacao_id, agregado, payload, criado_em)
		VALUES (nextval('bench_seq'), $1, $2, $3, $4, $5, $6, $7, $8, $9)`); err != nil {
		b.Fatal(err)
	}
}

func benchRow(payload json.RawMessage) []any {
	id := uuid.Must(uuid.NewV7()).String()
	now := time.Now().UnixMilli()
	return []any{id, "jornada:iniciada", "1.0.0", now, "app-jornada", id, "jornada:" + id, string(payload), now}
}

// benchPayload is about the 300 bytes of a redacted jornada:iniciada.
func benchPayload() json.RawMessage {
	return json.RawMessage(`{"jornadaId":"` + uuid.NewString() + `","motorista":{"id":"m-1","nome":"[redigido]"},` +
		`"veiculo":{"placa":"[redigido]","tipo":"ambulancia"},"origem":{"lat":-23.5505,"lon":-46.6333},` +
		`"inicio":"2026-01-01T00:00:00Z","observacao":"` + strings.Repeat("x", 80) + `"}`)
}
