-- Geohub database schema: the single source of truth, embedded into the binary.
--
-- Migrations are numbered blocks. Each block starts with a line
-- "-- migration: N" and is applied once, in order, inside one transaction;
-- PRAGMA user_version records the last applied N. A published block never
-- changes: new work goes in a new block at the end.

-- migration: 1

-- The append-only event log. sequence_number is the rowid, so it is the
-- clustered key: replay is a range scan, and every secondary index ends in it,
-- which serves "WHERE x = ? ORDER BY sequence_number" without a sort.
-- Rows are never updated or deleted, so rowids are never reused.
CREATE TABLE event_log (
    sequence_number INTEGER PRIMARY KEY,
    event_id        TEXT    NOT NULL,
    tipo            TEXT    NOT NULL,
    versao_schema   TEXT    NOT NULL,
    timestamp       INTEGER NOT NULL, -- unix milliseconds, UTC
    origem          TEXT    NOT NULL,
    correlacao_id   TEXT    NOT NULL,
    agregado        TEXT,
    autoria_id      TEXT,
    autoria_tipo    TEXT,
    solicitacao     TEXT,
    payload         TEXT    NOT NULL, -- the redacted payload, compact JSON
    criado_em       INTEGER NOT NULL  -- unix milliseconds, UTC
);
CREATE UNIQUE INDEX event_log_event_id_key     ON event_log (event_id);
CREATE INDEX event_log_tipo_idx                ON event_log (tipo);
CREATE INDEX event_log_correlacao_id_idx       ON event_log (correlacao_id);
CREATE INDEX event_log_agregado_idx            ON event_log (agregado) WHERE agregado IS NOT NULL;
CREATE INDEX event_log_origem_idx              ON event_log (origem);
CREATE INDEX event_log_timestamp_idx           ON event_log (timestamp);

-- The registry: one row per (tipo, versao). A published version never changes
-- its schema, rules or audience; only its status moves.
CREATE TABLE registry (
    tipo       TEXT    NOT NULL,
    versao     TEXT    NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('ativo', 'deprecado')),
    audiencia  TEXT    NOT NULL CHECK (audiencia IN ('originador', 'todos', 'solicitante')),
    schema     TEXT    NOT NULL,
    redacao    TEXT    NOT NULL,
    criado_em  INTEGER NOT NULL,
    PRIMARY KEY (tipo, versao)
) WITHOUT ROWID;

-- In-process consumer failures. tipo is kept beside sequence_number so a
-- consumer's cursor for one type can be held back by its own failures only.
CREATE TABLE dead_letter_queue (
    id               INTEGER PRIMARY KEY,
    event_id         TEXT    NOT NULL REFERENCES event_log (event_id),
    sequence_number  INTEGER NOT NULL,
    tipo             TEXT    NOT NULL,
    colonia          TEXT    NOT NULL,
    handler_nome     TEXT    NOT NULL,
    mensagem_erro    TEXT    NOT NULL,
    pilha_erro       TEXT    NOT NULL DEFAULT '',
    tentativas       INTEGER NOT NULL DEFAULT 1,
    ultima_tentativa INTEGER NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'pendente'
                     CHECK (status IN ('pendente', 'retrying', 'resolved', 'failed_permanent')),
    criado_em        INTEGER NOT NULL,
    resolvido_em     INTEGER
);
CREATE UNIQUE INDEX dead_letter_queue_event_id_colonia_key ON dead_letter_queue (event_id, colonia);
CREATE INDEX dead_letter_queue_status_colonia_idx ON dead_letter_queue (status, colonia, tipo, sequence_number);

-- Per-consumer, per-type cursors: the last sequence handled without a
-- pending failure before it.
CREATE TABLE consumer_cursor (
    colonia       TEXT    NOT NULL,
    tipo          TEXT    NOT NULL,
    last_sequence INTEGER NOT NULL,
    atualizado_em INTEGER NOT NULL,
    PRIMARY KEY (colonia, tipo)
) WITHOUT ROWID;

-- API tokens. Only the SHA-256 of a token is stored: tokens are 256-bit
-- random values, so a fast hash is enough and lookups stay O(1).
CREATE TABLE api_token (
    id         TEXT    PRIMARY KEY,
    nome       TEXT    NOT NULL,
    papel      TEXT    NOT NULL CHECK (papel IN ('admin', 'operador', 'leitor', 'produtor')),
    hash       TEXT    NOT NULL UNIQUE,
    criado_em  INTEGER NOT NULL,
    revogado_em INTEGER
) WITHOUT ROWID;

-- Console operators. Passwords are bcrypt hashes.
CREATE TABLE operator (
    id         TEXT    PRIMARY KEY,
    login      TEXT    NOT NULL UNIQUE,
    senha_hash TEXT    NOT NULL,
    papel      TEXT    NOT NULL CHECK (papel IN ('admin', 'operador', 'leitor')),
    criado_em  INTEGER NOT NULL
) WITHOUT ROWID;

-- migration: 2

-- Integrators (the cadastro). The signing secrets are sealed with a key
-- derived from the master key; the API key is stored as its SHA-256.
CREATE TABLE integrator (
    id                 TEXT    PRIMARY KEY,
    nome               TEXT    NOT NULL,
    callback_url       TEXT    NOT NULL,
    hosts_permitidos   TEXT    NOT NULL, -- JSON array
    eventos            TEXT    NOT NULL, -- JSON array of patterns
    backoff            TEXT    NOT NULL DEFAULT '[]', -- JSON array of Go durations
    ativo              INTEGER NOT NULL,
    motivo_inativo     TEXT    NOT NULL DEFAULT '',
    segredo            BLOB    NOT NULL,
    segredo_anterior   BLOB,
    segredo_anterior_ate INTEGER,
    api_key_hash       TEXT    NOT NULL UNIQUE,
    falhando_desde     INTEGER, -- first failed attempt since the last success
    criado_em          INTEGER NOT NULL,
    atualizado_em      INTEGER NOT NULL
) WITHOUT ROWID;

-- migration: 3

-- Who originated each aggregate: the first integrator whose event named it.
-- Events of audience "originador" go to this integrator only.
CREATE TABLE aggregate_owner (
    agregado      TEXT    PRIMARY KEY,
    integrador_id TEXT    NOT NULL,
    criado_em     INTEGER NOT NULL
) WITHOUT ROWID;

-- The last X-Geohub-Sequencia given per (integrator, aggregate): bumped in
-- the transaction that enqueues, so sequences are gapless.
CREATE TABLE outbox_sequence (
    integrador_id TEXT    NOT NULL,
    agregado      TEXT    NOT NULL,
    ultima        INTEGER NOT NULL,
    PRIMARY KEY (integrador_id, agregado)
) WITHOUT ROWID;

-- One row per (event, recipient), written in the event's transaction.
CREATE TABLE outbox (
    id                INTEGER PRIMARY KEY,
    event_id          TEXT    NOT NULL REFERENCES event_log (event_id),
    sequence_number   INTEGER NOT NULL,
    integrador_id     TEXT    NOT NULL REFERENCES integrator (id),
    tipo              TEXT    NOT NULL,
    agregado          TEXT    NOT NULL,
    sequencia         INTEGER NOT NULL,
    corpo             BLOB,             -- the envelope; NULL once purged after delivery
    status            TEXT    NOT NULL DEFAULT 'pendente'
                      CHECK (status IN ('pendente', 'processando', 'entregue', 'falhou')),
    tentativas        INTEGER NOT NULL DEFAULT 0,
    quedas            INTEGER NOT NULL DEFAULT 0, -- leases that expired: the worker died holding it
    proxima_tentativa INTEGER NOT NULL,
    lease_ate         INTEGER,
    worker            TEXT,
    ultimo_status     INTEGER,
    ultimo_erro       TEXT    NOT NULL DEFAULT '',
    entregue_em       INTEGER,
    criado_em         INTEGER NOT NULL,
    UNIQUE (integrador_id, agregado, sequencia),
    UNIQUE (event_id, integrador_id)
);
-- Claims read each integrator's due rows in order: (integrador_id, status,
-- proxima_tentativa) makes that a range seek whatever the backlog.
CREATE INDEX outbox_claim_idx   ON outbox (integrador_id, status, proxima_tentativa);
CREATE INDEX outbox_status_idx  ON outbox (status);
CREATE INDEX outbox_tipo_idx    ON outbox (tipo);
CREATE INDEX outbox_agregado_idx ON outbox (agregado);
CREATE INDEX outbox_lease_idx   ON outbox (lease_ate) WHERE status = 'processando';
CREATE INDEX outbox_purge_idx   ON outbox (entregue_em) WHERE corpo IS NOT NULL AND status = 'entregue';

-- Every delivery attempt, with a fresh X-Geohub-Entrega-Id.
CREATE TABLE delivery_attempt (
    id          INTEGER PRIMARY KEY,
    outbox_id   INTEGER NOT NULL REFERENCES outbox (id),
    entrega_id  TEXT    NOT NULL,
    tentativa   INTEGER NOT NULL,
    inicio      INTEGER NOT NULL,
    duracao_ms  INTEGER NOT NULL,
    status_code INTEGER,
    erro        TEXT    NOT NULL DEFAULT '',
    resposta    TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX delivery_attempt_outbox_idx ON delivery_attempt (outbox_id);

-- migration: 4

-- Console sessions. Only the SHA-256 of the cookie's secret is stored, so a
-- copy of the database opens no session.
CREATE TABLE operator_session (
    hash        TEXT    PRIMARY KEY,
    operador_id TEXT    NOT NULL REFERENCES operator (id),
    criado_em   INTEGER NOT NULL,
    expira_em   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX operator_session_expira_idx ON operator_session (expira_em);
CREATE INDEX operator_session_operador_idx ON operator_session (operador_id);

-- migration: 5

-- Fewer index writes per delivery: a claim and its outcome used to touch
-- eight index entries besides the row. Only pendente rows are claimed, so
-- the claim index holds only them: a claim removes the row from it and a
-- success never writes it. Expired leases are found through outbox_status_idx
-- (few rows are processando at any time), so the lease index goes.
DROP INDEX outbox_claim_idx;
DROP INDEX outbox_lease_idx;
CREATE INDEX outbox_due_idx ON outbox (integrador_id, proxima_tentativa) WHERE status = 'pendente';

-- migration: 6

-- Delivery bodies live beside the outbox rows, not in them: a claim and an
-- outcome each rewrite the whole row, and with its ~500-byte body in it
-- every commit of the dispatcher wrote four times the pages. The body is
-- written once and read at each claim; purging it deletes its row here.
CREATE TABLE outbox_corpo (
    outbox_id INTEGER PRIMARY KEY REFERENCES outbox (id),
    corpo     BLOB    NOT NULL
);
INSERT INTO outbox_corpo (outbox_id, corpo) SELECT id, corpo FROM outbox WHERE corpo IS NOT NULL;
ALTER TABLE outbox ADD COLUMN expurgado INTEGER NOT NULL DEFAULT 0; -- 1 once the body was purged
UPDATE outbox SET expurgado = 1 WHERE corpo IS NULL;
DROP INDEX outbox_purge_idx;
ALTER TABLE outbox DROP COLUMN corpo;
CREATE INDEX outbox_purge_idx ON outbox (entregue_em) WHERE status = 'entregue' AND expurgado = 0;

-- migration: 7

-- Operators can be deactivated: someone who leaves keeps no access, and the
-- account's history (who did what) stays. A deactivated operator's sessions
-- are deleted with the change and the login is refused.
ALTER TABLE operator ADD COLUMN ativo INTEGER NOT NULL DEFAULT 1;

-- migration: 8

-- In order per (integrator, aggregate) (SPEC 6.4): a claim takes a row only
-- when no row of its aggregate is on the wire and no earlier row of it is
-- due or still waits for its first attempt. The two partial indexes make
-- both checks a seek among the live rows of one aggregate, never its
-- delivered history.
CREATE INDEX outbox_inflight_idx ON outbox (integrador_id, agregado) WHERE status = 'processando';
CREATE INDEX outbox_waiting_idx  ON outbox (integrador_id, agregado, sequencia) WHERE status = 'pendente';
-- X-Geohub-Tentativa counts every attempt across resends; a resend gives a
-- fresh budget, counted from the attempts the row had when it was resent.
ALTER TABLE outbox ADD COLUMN tentativas_antes INTEGER NOT NULL DEFAULT 0;
-- Envelopes enqueued before origem.autoria was always present (SPEC 6.3)
-- and not yet delivered get the default author, the publishing system (its
-- origem, the envelope's plugin): receivers written from seed 000 read it
-- without a guard. origem is rebuilt with its keys in order, in place.
UPDATE outbox_corpo SET corpo = CAST(json_set(CAST(corpo AS TEXT), '$.origem',
        CASE WHEN json_extract(CAST(corpo AS TEXT), '$.origem.solicitacao') IS NULL
        THEN json_object(
            'autoria', json_object('id', json_extract(CAST(corpo AS TEXT), '$.origem.plugin'), 'tipo', 'sistema'),
            'plugin', json_extract(CAST(corpo AS TEXT), '$.origem.plugin'),
            'versao', json_extract(CAST(corpo AS TEXT), '$.origem.versao'))
        ELSE json_object(
            'autoria', json_object('id', json_extract(CAST(corpo AS TEXT), '$.origem.plugin'), 'tipo', 'sistema'),
            'plugin', json_extract(CAST(corpo AS TEXT), '$.origem.plugin'),
            'solicitacao', json_extract(CAST(corpo AS TEXT), '$.origem.solicitacao'),
            'versao', json_extract(CAST(corpo AS TEXT), '$.origem.versao'))
        END) AS BLOB)
    WHERE json_valid(CAST(corpo AS TEXT))
    AND json_extract(CAST(corpo AS TEXT), '$.origem.plugin') IS NOT NULL
    AND json_extract(CAST(corpo AS TEXT), '$.origem.autoria') IS NULL
    AND outbox_id IN (SELECT id FROM outbox WHERE status <> 'entregue');

-- migration: 9

-- The ocorrências read model (SPEC 7), kept by the built-in consumer of
-- colônia "ocorrencias" and read by GET /api/ocorrencias and the console.
-- It is derived from the log: each row is the fold of its aggregate, so it
-- can be rebuilt, and a row is only ever replaced by a fold that saw at
-- least the same events (ultima_sequencia never goes back). The rowid is
-- the sequence of the registration, so the newest-first keyset page is a
-- range scan on the table itself and a row never moves between pages.
CREATE TABLE ocorrencia (
    registrada_seq   INTEGER PRIMARY KEY,
    id               TEXT    NOT NULL,
    natureza         TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    integrador_id    TEXT,             -- the originator; NULL when an operator registered it
    registrada_em    INTEGER NOT NULL, -- unix milliseconds, UTC
    atualizada_em    INTEGER NOT NULL,
    versao           INTEGER NOT NULL, -- events folded
    ultima_sequencia INTEGER NOT NULL  -- the last of them
);
CREATE UNIQUE INDEX ocorrencia_id_key          ON ocorrencia (id);
CREATE INDEX ocorrencia_status_idx             ON ocorrencia (status, registrada_seq);
CREATE INDEX ocorrencia_natureza_idx           ON ocorrencia (natureza, registrada_seq);
CREATE INDEX ocorrencia_integrador_idx         ON ocorrencia (integrador_id, registrada_seq);
CREATE INDEX ocorrencia_registrada_em_idx      ON ocorrencia (registrada_em);

-- Each despacho of an ocorrência with its own status, in dispatch order.
CREATE TABLE ocorrencia_despacho (
    ocorrencia_seq INTEGER NOT NULL REFERENCES ocorrencia (registrada_seq),
    ordem          INTEGER NOT NULL,
    id             TEXT    NOT NULL,
    recurso        TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    PRIMARY KEY (ocorrencia_seq, ordem)
) WITHOUT ROWID;

-- The read model starts from the beginning of the log, not from its head
-- as a new consumer would (SPEC 4.5): ocorrências registered before this
-- version are folded in by the consumer's first catch-up.
INSERT INTO consumer_cursor (colonia, tipo, last_sequence, atualizado_em)
    SELECT 'ocorrencias', t.tipo, 0, CAST(strftime('%s', 'now') AS INTEGER) * 1000
    FROM (SELECT 'ocorrencia:registrada' AS tipo UNION ALL SELECT 'ocorrencia:despachada'
          UNION ALL SELECT 'ocorrencia:despacho-mudou-status' UNION ALL SELECT 'ocorrencia:mudou-status') t;

-- migration: 10

-- Integrator health (SPEC 9): the end of the last delivered attempt, set
-- with the outcomes of each batch, so that it survives a restart. Rates
-- and latencies of the last hour are the dispatcher's, in memory.
ALTER TABLE integrator ADD COLUMN ultimo_sucesso_em INTEGER;
-- An integrator's deliveries page by id (keyset, SPEC 9): with the unique
-- (integrador_id, event_id) index a page sorted every delivery the
-- integrator ever had; this one ends in the rowid, so a page is a range.
CREATE INDEX outbox_integrador_idx ON outbox (integrador_id);

-- migration: 11

-- The audit trail (SPEC 10): who changed what, when, from where, and with
-- what outcome. Each row is written in the transaction of the change it
-- records (a refusal, which changes nothing, on its own). It never holds a
-- secret, an API key, a token or a password, nor their hashes. Rows are
-- kept forever: the triggers refuse every UPDATE and DELETE, so no code
-- path, and no mistake in one, can rewrite the record of what happened.
-- em never goes back (the store takes the later of the clock and the last
-- row's em), so id order is time order: a time range is an id range, found
-- with two seeks of audit_log_em_idx, and every filter pages by keyset on
-- the rowid, newest first, through an index that ends in it.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY,
    em         INTEGER NOT NULL, -- unix milliseconds, UTC
    quem_tipo  TEXT    NOT NULL, -- operador, token, integrador, cli, sistema, anonimo
    quem_id    TEXT    NOT NULL,
    quem_nome  TEXT    NOT NULL,
    quem_papel TEXT    NOT NULL,
    endereco   TEXT    NOT NULL, -- the client's address; "local" for the CLI
    acao       TEXT    NOT NULL,
    alvo_tipo  TEXT    NOT NULL,
    alvo_id    TEXT    NOT NULL,
    alvo_nome  TEXT    NOT NULL,
    campos     TEXT    NOT NULL, -- JSON array of {campo, de, para}
    resultado  TEXT    NOT NULL CHECK (resultado IN ('ok', 'recusado', 'falhou')),
    codigo     TEXT    NOT NULL, -- the error code of a refusal
    detalhe    TEXT    NOT NULL
);
CREATE INDEX audit_log_quem_id_idx   ON audit_log (quem_id);
CREATE INDEX audit_log_quem_nome_idx ON audit_log (quem_nome);
CREATE INDEX audit_log_acao_idx      ON audit_log (acao);
CREATE INDEX audit_log_alvo_idx      ON audit_log (alvo_id);
CREATE INDEX audit_log_em_idx        ON audit_log (em);
CREATE TRIGGER audit_log_sem_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log é somente inclusão: linhas não mudam');
END;
CREATE TRIGGER audit_log_sem_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log é somente inclusão: linhas não são apagadas');
END;

-- migration: 12

-- Outbox bodies are sealed at rest (SPEC 6.4): the app encrypts each
-- envelope before it reaches the store, under a key derived from the
-- master key. A dead letter keeps its body for a retention of its own,
-- counted from falhou_em, when it dead-lettered; rows that dead-lettered
-- before this version, which kept their bodies forever, count from the
-- upgrade: an operator gets one whole retention to resend them, instead of
-- losing every one older than it at the first sweep.
ALTER TABLE outbox ADD COLUMN falhou_em INTEGER; -- unix milliseconds; NULL unless falhou
UPDATE outbox SET falhou_em = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
    WHERE status = 'falhou';
-- The purge walks the dead letters that still hold a body, oldest first;
-- a bulk resend reads an integrator's dead letters, with and without one.
-- Both hold dead letters only, so a delivery that succeeds never writes them.
CREATE INDEX outbox_falhou_idx ON outbox (falhou_em) WHERE status = 'falhou' AND expurgado = 0;
CREATE INDEX outbox_mortas_idx ON outbox (integrador_id, expurgado) WHERE status = 'falhou';
-- The bodies stored before this version are in clear: the server seals
-- them at its next start, in batches that each move cursor forward (so an
-- interrupted upgrade resumes), then rewrites the file (VACUUM) and empties
-- the WAL so that no free page keeps the clear text. Each of the three
-- steps is recorded, so a start after an interruption redoes only the step
-- that did not finish (a reader of another process can hold the WAL, and
-- VACUUM must not run again at every start because of it). A new database
-- passes through the same steps at its first start, over nothing.
CREATE TABLE outbox_selagem (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    cursor INTEGER NOT NULL, -- every body of an outbox row up to this id is sealed
    etapa  INTEGER NOT NULL  -- 0 sealing; 1 sealed and file rewritten, WAL to empty; 2 done
);
INSERT INTO outbox_selagem (id, cursor, etapa) VALUES (1, 0, 0);

-- migration: 13

-- State a process used to hold in memory, kept in the database so that
-- the replicas of a PostgreSQL deployment share it (SPEC 12; the same
-- tables there). On SQLite one process reads it, and now a restart keeps it.
--
-- Console login attempts within the limits' window (15 min), one row per
-- attempt and key ('ip:<address or /64>', 'login:<login>'); the attempts
-- of one login share its tentativa id, so a right password takes back its
-- own. Each attempt deletes the rows older than the window.
CREATE TABLE login_tentativa (
    chave     TEXT    NOT NULL,
    em        INTEGER NOT NULL, -- unix milliseconds
    tentativa TEXT    NOT NULL,
    PRIMARY KEY (chave, em, tentativa)
) WITHOUT ROWID;
CREATE INDEX login_tentativa_em_idx        ON login_tentativa (em);
CREATE INDEX login_tentativa_tentativa_idx ON login_tentativa (tentativa);

-- The last DLQ reprocess of each colônia (one a minute).
CREATE TABLE dlq_reprocesso (
    colonia TEXT    PRIMARY KEY,
    em      INTEGER NOT NULL -- unix milliseconds
) WITHOUT ROWID;

-- Each integrator's circuit breaker as last opened or closed by a process
-- (origem); versao grows with every write, so a reader takes each change once.
CREATE TABLE circuito (
    integrador_id TEXT    PRIMARY KEY,
    aberto        INTEGER NOT NULL,
    desde         INTEGER NOT NULL, -- unix milliseconds; 0 while closed
    ate           INTEGER NOT NULL, -- when a probe may go; 0 while closed
    cooldown_ms   INTEGER NOT NULL,
    falhas        INTEGER NOT NULL,
    origem        TEXT    NOT NULL,
    versao        INTEGER NOT NULL
) WITHOUT ROWID;

-- The cadastro's version: every insert of an integrator and every change
-- of its record, secrets or API key (each sets atualizado_em) moves it, so
-- a process reads the cadastro again only when it changed. The failing
-- period the dispatcher records does not touch atualizado_em.
CREATE TABLE cadastro_versao (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    versao INTEGER NOT NULL
);
INSERT INTO cadastro_versao (id, versao) VALUES (1, 0);
CREATE TRIGGER integrator_cadastro_insert AFTER INSERT ON integrator
BEGIN
    UPDATE cadastro_versao SET versao = versao + 1 WHERE id = 1;
END;
CREATE TRIGGER integrator_cadastro_update AFTER UPDATE OF atualizado_em ON integrator
BEGIN
    UPDATE cadastro_versao SET versao = versao + 1 WHERE id = 1;
END;
CREATE TRIGGER integrator_cadastro_delete AFTER DELETE ON integrator
BEGIN
    UPDATE cadastro_versao SET versao = versao + 1 WHERE id = 1;
END;

-- migration: 14

-- The check of the master key (app.CheckMasterKey): an HMAC of a constant
-- under a key derived from it, stored by the first open and compared by
-- every later one, so a process given another key (or pointed at another
-- installation's database) refuses to start before it seals or sends
-- anything. Empty until then: a database older than this migration takes
-- its value at its next open, once the key opens what it already sealed.
CREATE TABLE verificacao_chave (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    hmac       BLOB    NOT NULL,
    gravada_em INTEGER NOT NULL -- unix milliseconds
);

-- migration: 15

-- Receivers' answers sealed at rest. The first bytes of a receiver's answer
-- to each attempt (SPEC 6.4) can hold what the event carried: a CAD that
-- refuses an event may echo a name or a CPF in its error. New attempts keep
-- them only in resposta_selada (app.Sealer.SealResponse, bound to the
-- attempt's entrega_id) and leave resposta empty. The answers an earlier
-- version kept in clear are sealed by the same upgrade as the outbox bodies,
-- with its own cursor; a database holding any is sent back through its
-- steps, so its file is rewritten once more and its WAL emptied.
ALTER TABLE delivery_attempt ADD COLUMN resposta_selada BLOB;
ALTER TABLE outbox_selagem ADD COLUMN cursor_resposta INTEGER NOT NULL DEFAULT 0; -- every attempt up to this id is sealed
UPDATE outbox_selagem SET etapa = 0 WHERE EXISTS (SELECT 1 FROM delivery_attempt WHERE resposta <> '');

-- migration: 16

-- The integrators' portal (SPEC 8c). A sign-in link an admin or operador
-- makes for one integrator: its token kept as a hash, good once, for 24 h,
-- until revoked. A portal session, opened by a link or by the integrator's
-- API key, reaches that integrator only. Expired rows go with each insert.
CREATE TABLE portal_link (
    id            TEXT    PRIMARY KEY,
    hash          TEXT    NOT NULL UNIQUE,
    integrador_id TEXT    NOT NULL REFERENCES integrator (id),
    criado_em     INTEGER NOT NULL, -- unix milliseconds
    expira_em     INTEGER NOT NULL,
    usado_em      INTEGER,
    revogado_em   INTEGER
);
CREATE INDEX portal_link_integrador_idx ON portal_link (integrador_id);
CREATE INDEX portal_link_expira_idx ON portal_link (expira_em);
CREATE TABLE portal_session (
    hash          TEXT    PRIMARY KEY,
    integrador_id TEXT    NOT NULL REFERENCES integrator (id),
    criado_em     INTEGER NOT NULL, -- unix milliseconds
    expira_em     INTEGER NOT NULL
);
CREATE INDEX portal_session_expira_idx ON portal_session (expira_em);
-- A gap repair by time window (SPEC 8c) reads one integrator's rows by the
-- time they were enqueued: a range of this index, not a walk of its whole
-- history inside the writer's transaction. It also serves what the index
-- on integrador_id alone did.
DROP INDEX outbox_integrador_idx;
CREATE INDEX outbox_integrador_idx ON outbox (integrador_id, criado_em);

-- migration: 17

-- A receiver's answer goes with the body it answered (issue 26): the
-- purges now clear both; these are the answers to bodies purged before.
UPDATE delivery_attempt SET resposta = '', resposta_selada = NULL
WHERE (resposta <> '' OR resposta_selada IS NOT NULL)
  AND outbox_id IN (SELECT id FROM outbox WHERE expurgado = 1);

-- migration: 18

-- Each claim names its lease (issue 27, B4): an outcome, a deferral or a
-- renewal counts only while the row is still leased by the claim that
-- sent it, not by a later one of the same worker.
ALTER TABLE outbox ADD COLUMN lease_token INTEGER;

-- migration: 19

-- How an integrator receives (SPEC 8d, issue 29): 'callback', posted to
-- its callback_url, or 'sessao', over a websocket the CAD dials
-- (GET /api/sessao); a session integrator has no callback_url ('').
ALTER TABLE integrator ADD COLUMN entrega TEXT NOT NULL DEFAULT 'callback'
    CHECK (entrega IN ('callback', 'sessao'));

-- migration: 20

-- The last CAD session of each session integrator (SPEC 8d, issue 29), as
-- every process sees it: which session (sessao_id, new at every attach)
-- and which process (origem) hold it, from where and since when; visto_em
-- is its heartbeat, pendentes its deliveries then unanswered. A session
-- that finds another sessao_id here was replaced, on whichever replica:
-- one session per integrator. encerrada_em is 0 while open.
CREATE TABLE sessao_cad (
    integrador_id TEXT    PRIMARY KEY,
    sessao_id     TEXT    NOT NULL,
    origem        TEXT    NOT NULL,
    endereco      TEXT    NOT NULL,
    desde         INTEGER NOT NULL, -- unix milliseconds
    visto_em      INTEGER NOT NULL,
    pendentes     INTEGER NOT NULL,
    encerrada_em  INTEGER NOT NULL,
    motivo        TEXT    NOT NULL
) WITHOUT ROWID;
