package query

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"geohub/app"
)

// SaveCADSession implements app.CADSessionStore. A save that commits late
// (a write held up across a failover) never takes the record from a
// session that attached after it: that one stays the integrator's, and
// the late one finds itself replaced.
func (w *Writes) SaveCADSession(ctx context.Context, r app.CADSessionRecord) error {
	err := w.w.Write(ctx, Op{}, func(tx Tx) error {
		_, err := tx.Exec(`INSERT INTO sessao_cad (integrador_id, sessao_id, origem, endereco, desde, visto_em, pendentes, encerrada_em, motivo)
			VALUES (?, ?, ?, ?, ?, ?, 0, 0, '')
			ON CONFLICT (integrador_id) DO UPDATE SET sessao_id = excluded.sessao_id, origem = excluded.origem,
				endereco = excluded.endereco, desde = excluded.desde, visto_em = excluded.visto_em,
				pendentes = 0, encerrada_em = 0, motivo = ''
			WHERE sessao_cad.desde <= excluded.desde`,
			r.Integrador, r.Sessao, r.Origem, r.Endereco, MS(r.Desde), MS(r.Desde))
		return err
	})
	if err != nil {
		return fmt.Errorf("save CAD session: %w", err)
	}
	return nil
}

// TouchCADSession implements app.CADSessionStore.
func (w *Writes) TouchCADSession(ctx context.Context, integrador, sessao string, at time.Time, pendentes int) (bool, error) {
	var n int64
	err := w.w.Write(ctx, Op{}, func(tx Tx) error {
		var err error
		n, err = tx.Exec(`UPDATE sessao_cad SET visto_em = ?, pendentes = ?
			WHERE integrador_id = ? AND sessao_id = ? AND encerrada_em = 0`, MS(at), pendentes, integrador, sessao)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("touch CAD session: %w", err)
	}
	return n == 1, nil
}

// EndCADSession implements app.CADSessionStore.
func (w *Writes) EndCADSession(ctx context.Context, integrador, sessao string, at time.Time, motivo string) error {
	err := w.w.Write(ctx, Op{}, func(tx Tx) error {
		_, err := tx.Exec(`UPDATE sessao_cad SET visto_em = ?, encerrada_em = ?, pendentes = 0, motivo = ?
			WHERE integrador_id = ? AND sessao_id = ? AND encerrada_em = 0`, MS(at), MS(at), motivo, integrador, sessao)
		return err
	})
	if err != nil {
		return fmt.Errorf("end CAD session: %w", err)
	}
	return nil
}

const cadSessionColumns = `integrador_id, sessao_id, origem, endereco, desde, visto_em, pendentes, encerrada_em, motivo`

func scanCADSession(row Row) (app.CADSessionRecord, error) {
	var r app.CADSessionRecord
	var desde, visto, fim int64
	if err := row.Scan(&r.Integrador, &r.Sessao, &r.Origem, &r.Endereco, &desde, &visto, &r.Pendentes, &fim, &r.Motivo); err != nil {
		return r, err
	}
	r.Desde, r.VistoEm = FromMS(desde), FromMS(visto)
	if fim != 0 {
		r.EncerradaEm = FromMS(fim)
	}
	return r, nil
}

// CADSessionRecord implements app.CADSessionStore.
func (r *Reads) CADSessionRecord(ctx context.Context, integrador string) (app.CADSessionRecord, bool, error) {
	rec, err := scanCADSession(r.c.QueryRow(ctx, `SELECT `+cadSessionColumns+` FROM sessao_cad WHERE integrador_id = ?`, integrador))
	if errors.Is(err, sql.ErrNoRows) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("read CAD session: %w", err)
	}
	return rec, true, nil
}

// CADSessionRecords implements app.CADSessionStore.
func (r *Reads) CADSessionRecords(ctx context.Context) ([]app.CADSessionRecord, error) {
	rows, err := r.c.Query(ctx, `SELECT `+cadSessionColumns+` FROM sessao_cad ORDER BY integrador_id`)
	if err != nil {
		return nil, fmt.Errorf("read CAD sessions: %w", err)
	}
	out, err := Collect(rows, scanCADSession)
	if err != nil {
		return nil, fmt.Errorf("read CAD sessions: %w", err)
	}
	return out, nil
}
