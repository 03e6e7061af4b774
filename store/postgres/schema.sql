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

-- Every delivery attempt (SPEC 6.4), as SQLite's. The console's live tail
-- follows it by "id > last seen" (AttemptsAfter), so ids must be given in
-- commit order across replicas, as event sequences are: attempts are
-- inserted only while the transaction holds attempt_head's row lock (see
-- FinishDeliveries in outbox.go), which it keeps until COMMIT.
CREATE TABLE attempt_head (
    id INTEGER PRIMARY KEY CHECK (id = 1)
);
INSERT INTO attempt_head (id) VALUES (1);
CREATE TABLE delivery_attempt (
    id          BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id   BIGINT  NOT NULL REFERENCES outbox (id),
    entrega_id  TEXT    NOT NULL,
    tentativa   INTEGER NOT NULL,
    inicio      BIGINT  NOT NULL,
    duracao_ms  BIGINT  NOT NULL,
    status_code INTEGER,
    erro        TEXT    NOT NULL DEFAULT '',
    resposta    TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX delivery_attempt_outbox_idx ON delivery_attempt (outbox_id, id);
-- An attempt is recorded once: a finishing batch whose commit was not
-- confirmed (the link to the database broke) is sent again by the
-- dispatcher, and its attempts must not appear twice.
CREATE UNIQUE INDEX delivery_attempt_entrega_key ON delivery_attempt (outbox_id, entrega_id);

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

-- The registry: one row per (tipo, versao), as SQLite's. A published
-- version never changes its schema, rules or audience; only its status
-- moves. schema and redacao are the JSON text as registered (not jsonb,
-- which would reorder keys).
CREATE TABLE registry (
    tipo       TEXT   NOT NULL,
    versao     TEXT   NOT NULL,
    status     TEXT   NOT NULL CHECK (status IN ('ativo', 'deprecado')),
    audiencia  TEXT   NOT NULL CHECK (audiencia IN ('originador', 'todos', 'solicitante')),
    schema     TEXT   NOT NULL,
    redacao    TEXT   NOT NULL,
    criado_em  BIGINT NOT NULL,
    PRIMARY KEY (tipo, versao)
);

-- In-process consumer failures, as SQLite's. tipo is kept beside
-- sequence_number so a consumer's cursor for one type is held back by its
-- own failures only.
CREATE TABLE dead_letter_queue (
    id               BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         TEXT    NOT NULL REFERENCES event_log (event_id),
    sequence_number  BIGINT  NOT NULL,
    tipo             TEXT    NOT NULL,
    colonia          TEXT    NOT NULL,
    handler_nome     TEXT    NOT NULL,
    mensagem_erro    TEXT    NOT NULL,
    pilha_erro       TEXT    NOT NULL DEFAULT '',
    tentativas       INTEGER NOT NULL DEFAULT 1,
    ultima_tentativa BIGINT  NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pendente'
                     CHECK (status IN ('pendente', 'retrying', 'resolved', 'failed_permanent')),
    criado_em        BIGINT  NOT NULL,
    resolvido_em     BIGINT
);
CREATE UNIQUE INDEX dead_letter_queue_event_id_colonia_key ON dead_letter_queue (event_id, colonia);
-- Every read of the queue but the upsert's asks for open entries (pendente
-- or retrying), which are few: partial indexes over them only. The cursor
-- clamp seeks the first open failure of (colonia, tipo); DLQOpen reads a
-- colonia's in log order; DLQStats counts per colonia and lists the newest.
CREATE INDEX dead_letter_queue_open_tipo_idx ON dead_letter_queue (colonia, tipo, sequence_number)
    WHERE status IN ('pendente', 'retrying');
CREATE INDEX dead_letter_queue_open_seq_idx  ON dead_letter_queue (colonia, sequence_number)
    WHERE status IN ('pendente', 'retrying');
CREATE INDEX dead_letter_queue_open_id_idx   ON dead_letter_queue (id)
    WHERE status IN ('pendente', 'retrying');

-- Per-consumer, per-type cursors: the last sequence handled without a
-- pending failure before it.
CREATE TABLE consumer_cursor (
    colonia       TEXT   NOT NULL,
    tipo          TEXT   NOT NULL,
    last_sequence BIGINT NOT NULL,
    atualizado_em BIGINT NOT NULL,
    PRIMARY KEY (colonia, tipo)
);

-- API tokens. Only the SHA-256 of a token is stored.
CREATE TABLE api_token (
    id          TEXT   PRIMARY KEY,
    nome        TEXT   NOT NULL,
    papel       TEXT   NOT NULL CHECK (papel IN ('admin', 'operador', 'leitor', 'produtor')),
    hash        TEXT   NOT NULL UNIQUE,
    criado_em   BIGINT NOT NULL,
    revogado_em BIGINT
);

-- Console operators. Passwords are bcrypt hashes. A deactivated operator
-- keeps the account (the trail names it) and loses every session.
CREATE TABLE operator (
    id         TEXT    PRIMARY KEY,
    login      TEXT    NOT NULL UNIQUE,
    senha_hash TEXT    NOT NULL,
    papel      TEXT    NOT NULL CHECK (papel IN ('admin', 'operador', 'leitor')),
    criado_em  BIGINT  NOT NULL,
    ativo      BOOLEAN NOT NULL DEFAULT true
);

-- Console sessions, shared by every replica: a login on one is a session
-- on all. Only the SHA-256 of the cookie's secret is stored.
CREATE TABLE operator_session (
    hash        TEXT   PRIMARY KEY,
    operador_id TEXT   NOT NULL REFERENCES operator (id),
    criado_em   BIGINT NOT NULL,
    expira_em   BIGINT NOT NULL
);
CREATE INDEX operator_session_expira_idx   ON operator_session (expira_em);
CREATE INDEX operator_session_operador_idx ON operator_session (operador_id);

-- The ocorrências read model (SPEC 7), as SQLite's: each row is the fold
-- of its aggregate, keyed by the sequence of its registration, and only
-- ever replaced by a fold that saw at least as much of the log. The filter
-- indexes end in registrada_seq, so a filtered newest-first keyset page is
-- a backward range of one index without a sort.
CREATE TABLE ocorrencia (
    registrada_seq   BIGINT  PRIMARY KEY,
    id               TEXT    NOT NULL,
    natureza         TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    integrador_id    TEXT,             -- the originator; NULL when an operator registered it
    registrada_em    BIGINT  NOT NULL, -- unix milliseconds, UTC
    atualizada_em    BIGINT  NOT NULL,
    versao           INTEGER NOT NULL, -- events folded
    ultima_sequencia BIGINT  NOT NULL  -- the last of them
);
CREATE UNIQUE INDEX ocorrencia_id_key       ON ocorrencia (id);
CREATE INDEX ocorrencia_status_idx          ON ocorrencia (status, registrada_seq);
CREATE INDEX ocorrencia_natureza_idx        ON ocorrencia (natureza, registrada_seq);
CREATE INDEX ocorrencia_integrador_idx      ON ocorrencia (integrador_id, registrada_seq);
CREATE INDEX ocorrencia_registrada_em_idx   ON ocorrencia (registrada_em, registrada_seq);

-- Each despacho of an ocorrência with its own status, in dispatch order.
CREATE TABLE ocorrencia_despacho (
    ocorrencia_seq BIGINT  NOT NULL REFERENCES ocorrencia (registrada_seq),
    ordem          INTEGER NOT NULL,
    id             TEXT    NOT NULL,
    recurso        TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    PRIMARY KEY (ocorrencia_seq, ordem)
);

-- The read model starts from the beginning of the log, not from its head
-- as a new consumer would (SPEC 4.5), as SQLite's migration 9 seeds it.
INSERT INTO consumer_cursor (colonia, tipo, last_sequence, atualizado_em)
    SELECT 'ocorrencias', t.tipo, 0, (extract(epoch FROM now()) * 1000)::bigint
    FROM (VALUES ('ocorrencia:registrada'), ('ocorrencia:despachada'),
                 ('ocorrencia:despacho-mudou-status'), ('ocorrencia:mudou-status')) AS t (tipo);

-- migration: 2

-- State a process used to hold in memory, shared by every replica through
-- the database (SPEC 12), as SQLite's migration 13.
--
-- Console login attempts within the limits' window, one row per attempt
-- and key ('ip:…', 'login:…'). Each attempt takes a transaction-level
-- advisory lock per key, in key order, so two replicas counting the same
-- key cannot both slip under the limit.
CREATE TABLE login_tentativa (
    chave     TEXT   NOT NULL,
    em        BIGINT NOT NULL, -- unix milliseconds
    tentativa TEXT   NOT NULL,
    PRIMARY KEY (chave, em, tentativa)
);
CREATE INDEX login_tentativa_em_idx        ON login_tentativa (em);
CREATE INDEX login_tentativa_tentativa_idx ON login_tentativa (tentativa);

-- The last DLQ reprocess of each colônia (one a minute, on any replica).
CREATE TABLE dlq_reprocesso (
    colonia TEXT   PRIMARY KEY,
    em      BIGINT NOT NULL
);

-- Each integrator's circuit breaker as last opened or closed by a replica
-- (origem); versao grows with every write.
CREATE TABLE circuito (
    integrador_id TEXT    PRIMARY KEY,
    aberto        BOOLEAN NOT NULL,
    desde         BIGINT  NOT NULL,
    ate           BIGINT  NOT NULL,
    cooldown_ms   BIGINT  NOT NULL,
    falhas        INTEGER NOT NULL,
    origem        TEXT    NOT NULL,
    versao        BIGINT  NOT NULL
);

-- The cadastro's version, moved by every insert of an integrator and every
-- change that sets atualizado_em (record, secrets, API key), never by the
-- failing period the dispatcher records: replicas poll it and read the
-- cadastro again only when it moved.
CREATE TABLE cadastro_versao (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    versao BIGINT  NOT NULL
);
INSERT INTO cadastro_versao (id, versao) VALUES (1, 0);
CREATE FUNCTION cadastro_versao_mudou() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cadastro_versao SET versao = versao + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER integrator_cadastro AFTER INSERT OR DELETE OR UPDATE OF atualizado_em ON integrator
    FOR EACH ROW EXECUTE FUNCTION cadastro_versao_mudou();

-- migration: 3

-- The leader of the periodic duties (SPEC 12): the replica whose term runs,
-- its number and its expiry by the database's clock (see leader.go). One
-- row, kept across terms so that mandato only grows; a resigned term
-- expires at once.
CREATE TABLE lider (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    replica   TEXT    NOT NULL,
    mandato   BIGINT  NOT NULL,
    eleito_em BIGINT  NOT NULL, -- unix milliseconds, the database's clock
    expira_em BIGINT  NOT NULL
);

-- migration: 4

-- The check of the master key, as SQLite's (app.CheckMasterKey): every
-- replica must be given the same key, and the first to open the database
-- stores the value the others compare (INSERT … ON CONFLICT DO NOTHING, so
-- replicas starting together keep the first one's).
CREATE TABLE verificacao_chave (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    hmac       BYTEA   NOT NULL,
    gravada_em BIGINT  NOT NULL -- unix milliseconds
);

-- migration: 5

-- Receivers' answers sealed at rest, as SQLite's migration 15: new attempts
-- keep the first bytes of the answer only in resposta_selada. A PostgreSQL
-- database is filled by migrate-data from a SQLite one whose upgrade is
-- done, so it holds no clear answer to seal.
ALTER TABLE delivery_attempt ADD COLUMN resposta_selada BYTEA;

-- migration: 6

-- The integrators' portal, as SQLite's migration 16: sign-in links (a hash,
-- good once, for 24 h, until revoked) and portal sessions, each for one
-- integrator.
CREATE TABLE portal_link (
    id            TEXT    PRIMARY KEY,
    hash          TEXT    NOT NULL UNIQUE,
    integrador_id TEXT    NOT NULL REFERENCES integrator (id),
    criado_em     BIGINT  NOT NULL, -- unix milliseconds
    expira_em     BIGINT  NOT NULL,
    usado_em      BIGINT,
    revogado_em   BIGINT
);
CREATE INDEX portal_link_integrador_idx ON portal_link (integrador_id);
CREATE INDEX portal_link_expira_idx ON portal_link (expira_em);
CREATE TABLE portal_session (
    hash          TEXT    PRIMARY KEY,
    integrador_id TEXT    NOT NULL REFERENCES integrator (id),
    criado_em     BIGINT  NOT NULL, -- unix milliseconds
    expira_em     BIGINT  NOT NULL
);
CREATE INDEX portal_session_expira_idx ON portal_session (expira_em);
-- A gap repair by time window reads one integrator's rows by the time they
-- were enqueued: a range of this index.
CREATE INDEX outbox_integrador_criado_idx ON outbox (integrador_id, criado_em);

-- migration: 7

-- A receiver's answer goes with the body it answered (issue 26): the
-- purges now clear both; these are the answers to bodies purged before.
UPDATE delivery_attempt SET resposta = '', resposta_selada = NULL
WHERE (resposta <> '' OR resposta_selada IS NOT NULL)
  AND outbox_id IN (SELECT id FROM outbox WHERE expurgado);

-- migration: 8

-- Each claim names its lease (issue 27, B4): an outcome, a deferral or a
-- renewal counts only while the row is still leased by the claim that
-- sent it, not by a later one of the same or another replica.
ALTER TABLE outbox ADD COLUMN lease_token BIGINT;

-- migration: 9

-- Replicas hear at once of one another's changes to what each keeps in
-- memory (issue 27): an integrator's record (what moves the cadastro's
-- version), a registry version, a token, a circuit. The notification goes
-- at COMMIT, once per transaction and table; each replica reads the state
-- again. The one-second polls stay, for a listener that lost its
-- connection.
CREATE FUNCTION compartilhado_mudou() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('geohub_compartilhado', TG_TABLE_NAME);
    RETURN NULL;
END;
$$;
CREATE TRIGGER integrator_compartilhado AFTER INSERT OR DELETE OR UPDATE OF atualizado_em ON integrator
    FOR EACH STATEMENT EXECUTE FUNCTION compartilhado_mudou();
CREATE TRIGGER registry_compartilhado AFTER INSERT OR UPDATE OR DELETE ON registry
    FOR EACH STATEMENT EXECUTE FUNCTION compartilhado_mudou();
CREATE TRIGGER api_token_compartilhado AFTER INSERT OR UPDATE OR DELETE ON api_token
    FOR EACH STATEMENT EXECUTE FUNCTION compartilhado_mudou();
CREATE TRIGGER circuito_compartilhado AFTER INSERT OR UPDATE OR DELETE ON circuito
    FOR EACH STATEMENT EXECUTE FUNCTION compartilhado_mudou();

-- migration: 10

-- Every claim and every finish writes a new version of its outbox row
-- (status is indexed, so no update is HOT), and each version goes into
-- every index that covers it (issue 28). Two indexes covered every row
-- for readers that need fewer: the counts by status now read the partial
-- indexes of live rows and the primary key, and a gap repair by time reads
-- only settled rows, which its index now holds alone. That also leaves
-- the claim's searches of pending rows one index each to choose.
DROP INDEX outbox_status_idx;
DROP INDEX outbox_integrador_criado_idx;
CREATE INDEX outbox_assentadas_criado_idx ON outbox (integrador_id, criado_em) WHERE status IN ('entregue', 'falhou');

-- migration: 11

-- Every delivery leaves two dead versions of its outbox row (the claim's
-- and the finish's), and the claim's searches of pending rows step over
-- their index entries until a vacuum removes them: an outbox with 40,000
-- deliveries not yet vacuumed drained at 0.85 of a vacuumed one (issue
-- 28, drain-history). By default autovacuum waits for a fifth of the
-- table to be dead, which for a week of delivered rows kept (the body
-- retention) is tens of thousands of versions; a hundredth keeps them a
-- few thousand. Delivered rows themselves cost the claim nothing once
-- vacuumed: it reads only the partial indexes of live rows.
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);

-- migration: 12

-- How an integrator receives (SPEC 8d, issue 29), as SQLite's migration 19.
ALTER TABLE integrator ADD COLUMN entrega TEXT NOT NULL DEFAULT 'callback'
    CHECK (entrega IN ('callback', 'sessao'));

-- migration: 13

-- The last CAD session of each session integrator (SPEC 8d, issue 29), as
-- SQLite's migration 20: one session per integrator across the replicas.
CREATE TABLE sessao_cad (
    integrador_id TEXT    PRIMARY KEY,
    sessao_id     TEXT    NOT NULL,
    origem        TEXT    NOT NULL,
    endereco      TEXT    NOT NULL,
    desde         BIGINT  NOT NULL,
    visto_em      BIGINT  NOT NULL,
    pendentes     INTEGER NOT NULL,
    encerrada_em  BIGINT  NOT NULL,
    motivo        TEXT    NOT NULL
);
