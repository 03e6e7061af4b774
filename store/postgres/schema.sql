-- Geohub's PostgreSQL schema, embedded into the binary beside SQLite's
-- (../../schema.sql). The tables mean what SQLite's of the same name mean;
-- the differences are dialect, and each is said where it is made.
--
-- Migrations are numbered blocks. Each block starts with a line
-- "-- migration: N" and is applied once, in order, in one transaction that
-- holds an advisory transaction lock, so that replicas starting together
-- apply it once; the table schema_migrations records each applied N. A
-- published block never changes: new work goes in a new block at the end.
--
-- Times are unix milliseconds in BIGINT, as in SQLite, so both backends
-- share their conversions and a data migration copies values unchanged.
-- Flags SQLite keeps as 0/1 integers are BOOLEAN here.

-- migration: 1

-- The head of the log: the last sequence_number given. Appends take its
-- row lock before they write events and keep it until COMMIT, so the
-- transactions that give sequences commit one after another in the order
-- they gave them (see Append in events.go). A PostgreSQL sequence would
-- give numbers in call order but let the transactions commit in any order.
CREATE TABLE log_head (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    ultima BIGINT  NOT NULL
);
INSERT INTO log_head (id, ultima) VALUES (1, 0);

-- The append-only event log. sequence_number is given by the store from
-- log_head, never by a default.
CREATE TABLE event_log (
    sequence_number BIGINT PRIMARY KEY,
    event_id        TEXT   NOT NULL,
    tipo            TEXT   NOT NULL,
    versao_schema   TEXT   NOT NULL,
    timestamp       BIGINT NOT NULL, -- unix milliseconds, UTC
    origem          TEXT   NOT NULL,
    correlacao_id   TEXT   NOT NULL,
    agregado        TEXT,
    autoria_id      TEXT,
    autoria_tipo    TEXT,
    solicitacao     TEXT,
    payload         TEXT   NOT NULL, -- the redacted payload, compact JSON as published (not jsonb, which reorders keys)
    criado_em       BIGINT NOT NULL  -- unix milliseconds, UTC
);
CREATE UNIQUE INDEX event_log_event_id_key ON event_log (event_id);
-- PostgreSQL's secondary indexes do not end in the primary key as SQLite's
-- end in the rowid: each filter index names sequence_number, so that
-- "WHERE x = $1 ORDER BY sequence_number" is an index range without a sort.
CREATE INDEX event_log_tipo_idx          ON event_log (tipo, sequence_number);
CREATE INDEX event_log_correlacao_id_idx ON event_log (correlacao_id, sequence_number);
CREATE INDEX event_log_agregado_idx      ON event_log (agregado, sequence_number) WHERE agregado IS NOT NULL;
CREATE INDEX event_log_origem_idx        ON event_log (origem, sequence_number);
CREATE INDEX event_log_timestamp_idx     ON event_log (timestamp);

-- Integrators (the cadastro), as SQLite's after its migration 10. The
-- outbox references them.
CREATE TABLE integrator (
    id                   TEXT    PRIMARY KEY,
    nome                 TEXT    NOT NULL,
    callback_url         TEXT    NOT NULL,
    hosts_permitidos     TEXT    NOT NULL, -- JSON array
    eventos              TEXT    NOT NULL, -- JSON array of patterns
    backoff              TEXT    NOT NULL DEFAULT '[]', -- JSON array of Go durations
    ativo                BOOLEAN NOT NULL,
    motivo_inativo       TEXT    NOT NULL DEFAULT '',
    segredo              BYTEA   NOT NULL,
    segredo_anterior     BYTEA,
    segredo_anterior_ate BIGINT,
    api_key_hash         TEXT    NOT NULL UNIQUE,
    falhando_desde       BIGINT, -- first failed attempt since the last success
    criado_em            BIGINT  NOT NULL,
    atualizado_em        BIGINT  NOT NULL,
    ultimo_sucesso_em    BIGINT
);

-- Who originated each aggregate: the first integrator whose event named it.
CREATE TABLE aggregate_owner (
    agregado      TEXT   PRIMARY KEY,
    integrador_id TEXT   NOT NULL,
    criado_em     BIGINT NOT NULL
);

-- The last X-Geohub-Sequencia given per (integrator, aggregate): bumped in
-- the transaction that enqueues, so sequences are gapless.
CREATE TABLE outbox_sequence (
    integrador_id TEXT   NOT NULL,
    agregado      TEXT   NOT NULL,
    ultima        BIGINT NOT NULL,
    PRIMARY KEY (integrador_id, agregado)
);

-- One row per (event, recipient), written in the event's transaction, as
-- SQLite's after its migration 12. Rows are inserted only while the
-- transaction holds log_head's lock, so ids, like sequence numbers, are
-- given in commit order.
CREATE TABLE outbox (
    id                BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id          TEXT    NOT NULL REFERENCES event_log (event_id),
    sequence_number   BIGINT  NOT NULL,
    integrador_id     TEXT    NOT NULL REFERENCES integrator (id),
    tipo              TEXT    NOT NULL,
    agregado          TEXT    NOT NULL,
    sequencia         BIGINT  NOT NULL,
    status            TEXT    NOT NULL DEFAULT 'pendente'
                      CHECK (status IN ('pendente', 'processando', 'entregue', 'falhou')),
    tentativas        INTEGER NOT NULL DEFAULT 0,
    quedas            INTEGER NOT NULL DEFAULT 0, -- leases that expired: the worker died holding it
    proxima_tentativa BIGINT  NOT NULL,
    lease_ate         BIGINT,
    worker            TEXT,
    ultimo_status     INTEGER,
    ultimo_erro       TEXT    NOT NULL DEFAULT '',
    entregue_em       BIGINT,
    criado_em         BIGINT  NOT NULL,
    expurgado         BOOLEAN NOT NULL DEFAULT false, -- true once the body was purged
    tentativas_antes  INTEGER NOT NULL DEFAULT 0,
    falhou_em         BIGINT, -- unix milliseconds; NULL unless falhou
    UNIQUE (integrador_id, agregado, sequencia),
    UNIQUE (event_id, integrador_id)
);
CREATE INDEX outbox_due_idx        ON outbox (integrador_id, proxima_tentativa, id) WHERE status = 'pendente';
CREATE INDEX outbox_inflight_idx   ON outbox (integrador_id, agregado) WHERE status = 'processando';
CREATE INDEX outbox_waiting_idx    ON outbox (integrador_id, agregado, sequencia) WHERE status = 'pendente';
CREATE INDEX outbox_status_idx     ON outbox (status);
CREATE INDEX outbox_tipo_idx       ON outbox (tipo, id);
CREATE INDEX outbox_agregado_idx   ON outbox (agregado, id);
CREATE INDEX outbox_integrador_idx ON outbox (integrador_id, id);
CREATE INDEX outbox_purge_idx      ON outbox (entregue_em) WHERE status = 'entregue' AND NOT expurgado;
CREATE INDEX outbox_falhou_idx     ON outbox (falhou_em) WHERE status = 'falhou' AND NOT expurgado;
CREATE INDEX outbox_mortas_idx     ON outbox (integrador_id, expurgado) WHERE status = 'falhou';

-- Delivery bodies beside their rows (sealed envelopes): written once, read
-- at each claim, deleted by the purge.
CREATE TABLE outbox_corpo (
    outbox_id BIGINT PRIMARY KEY REFERENCES outbox (id),
    corpo     BYTEA  NOT NULL
);

-- The audit trail (SPEC 10), as SQLite's: append-only, enforced by
-- triggers. A command's audit entry is written in its events' transaction.
CREATE TABLE audit_log (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    em         BIGINT NOT NULL, -- unix milliseconds, UTC
    quem_tipo  TEXT   NOT NULL,
    quem_id    TEXT   NOT NULL,
    quem_nome  TEXT   NOT NULL,
    quem_papel TEXT   NOT NULL,
    endereco   TEXT   NOT NULL,
    acao       TEXT   NOT NULL,
    alvo_tipo  TEXT   NOT NULL,
    alvo_id    TEXT   NOT NULL,
    alvo_nome  TEXT   NOT NULL,
    campos     TEXT   NOT NULL, -- JSON array of {campo, de, para}
    resultado  TEXT   NOT NULL CHECK (resultado IN ('ok', 'recusado', 'falhou')),
    codigo     TEXT   NOT NULL,
    detalhe    TEXT   NOT NULL
);
CREATE INDEX audit_log_quem_id_idx   ON audit_log (quem_id, id);
CREATE INDEX audit_log_quem_nome_idx ON audit_log (quem_nome, id);
CREATE INDEX audit_log_acao_idx      ON audit_log (acao, id);
CREATE INDEX audit_log_alvo_idx      ON audit_log (alvo_id, id);
CREATE INDEX audit_log_em_idx        ON audit_log (em, id);
CREATE FUNCTION audit_log_somente_inclusao() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log é somente inclusão: linhas não mudam nem são apagadas';
END $$;
CREATE TRIGGER audit_log_sem_mudanca BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_somente_inclusao();
