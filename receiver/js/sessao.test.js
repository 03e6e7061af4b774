'use strict';
// Testes do cliente da sessão (sessao.js) e de Receptor.receberEntrega.
//
// Duas partes:
//
// - sem servidor: o cliente contra um WebSocket falso (injetado por
//   opcoes.WebSocket), para o que um servidor de verdade não mostra sob
//   encomenda: espera crescente, mensagem ilegível, servidor calado,
//   resposta a uma conexão que já caiu;
// - contra um Geohub de verdade, quando GEOHUB_SESSAO_URL (a base http,
//   como http://127.0.0.1:8080) e GEOHUB_SESSAO_TOKEN (um token admin) estão
//   no ambiente; sem eles, pulada com um aviso. O servidor precisa aceitar
//   callback http:// em loopback (--insecure-callbacks ou --demo), para o
//   cadastro por callback do teste do 4001. O Node.js 20 precisa de
//   --experimental-websocket:
//
//     GEOHUB_SESSAO_URL=http://127.0.0.1:8080 GEOHUB_SESSAO_TOKEN=gh_... \
//       node --experimental-websocket --test receiver/js/sessao.test.js
//
//   O teste TestJavaScriptSessionClient (cmd/geohub) sobe o servidor e
//   roda esta parte.

const test = require('node:test');
const assert = require('node:assert/strict');
const { randomUUID } = require('node:crypto');

const { Receptor, assinar, MOTIVO } = require('./receptor.js');
const { SessaoGeohub, CODIGO, ESTADO, urlsDaSessao } = require('./sessao.js');
const { umEnvelope } = require('./testdata/ajuda.js');

/**
 * Espera `condicao()` ficar verdadeira, olhando a cada 25 ms, até `prazoMs`.
 * `descrever()` diz, na falha, como as coisas estavam.
 */
async function esperar(oQue, condicao, { prazoMs = 20000, descrever = () => '' } = {}) {
  const limite = Date.now() + prazoMs;
  for (;;) {
    if (await condicao()) return;
    if (Date.now() > limite) {
      throw new Error(`esperando ${oQue}: não aconteceu em ${prazoMs} ms (${await descrever()})`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}

const dormir = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- Receptor.receberEntrega: o miolo de receber, sem HTTP. ----

const AGORA = 1761912251;
const SEGREDO = 'whsec-atual';

/** Cabeçalhos do Geohub em minúsculas, como vêm numa mensagem da sessão. */
function cabecalhosDaSessao(corpo, { segredo = SEGREDO, ts = AGORA, agregado = 'ocorrencia:oc-1', sequencia = 1, eventoId } = {}) {
  return {
    'x-geohub-evento-id': eventoId ?? JSON.parse(corpo).id,
    'x-geohub-timestamp': String(ts),
    'x-geohub-assinatura': assinar(segredo, ts, corpo),
    'x-geohub-agregado': agregado,
    'x-geohub-sequencia': String(sequencia),
    'x-geohub-entrega-id': randomUUID(),
    'x-geohub-tentativa': '1',
  };
}

function umReceptor({ aoAplicar, ...opcoes } = {}) {
  const aplicados = [];
  const receptor = new Receptor({
    segredos: [SEGREDO],
    integradorId: 'cad-1',
    agora: () => AGORA * 1000,
    aoAplicar: async (envelope, entrega) => {
      await aoAplicar?.(envelope, entrega);
      aplicados.push({ id: envelope.id, sequencia: entrega.sequencia });
    },
    ...opcoes,
  });
  return { receptor, aplicados };
}

test('receberEntrega: string ou Buffer, os mesmos status de receber', async () => {
  const { receptor, aplicados } = umReceptor();
  const e1 = JSON.stringify(umEnvelope());
  const e2 = JSON.stringify(umEnvelope({ tipo: 'ocorrencia:registrada' }));
  // A 2 chega antes da 1: espera, e drena quando a 1 chega.
  assert.equal(await receptor.receberEntrega(cabecalhosDaSessao(e2, { sequencia: 2 }), Buffer.from(e2)), 204);
  assert.equal(await receptor.receberEntrega(cabecalhosDaSessao(e1, { sequencia: 1 }), e1), 204);
  assert.deepEqual(aplicados.map((a) => a.sequencia), [1, 2]);
  assert.equal(await receptor.receberEntrega(cabecalhosDaSessao(e1, { sequencia: 1 }), e1), 204, 'repetido');
  assert.equal(aplicados.length, 2);

  const e3 = JSON.stringify(umEnvelope());
  const errada = cabecalhosDaSessao(e3, { sequencia: 3, segredo: 'outro' });
  assert.equal(await receptor.receberEntrega(errada, e3), 401);
  // Um byte a mais no corpo, depois da assinatura, também é 401.
  assert.equal(await receptor.receberEntrega(cabecalhosDaSessao(e3, { sequencia: 3 }), `${e3} `), 401);
  // A lista de assinaturas, como vem num cabeçalho repetido.
  const lista = cabecalhosDaSessao(e3, { sequencia: 3 });
  lista['x-geohub-assinatura'] = [assinar('outro', AGORA, e3), lista['x-geohub-assinatura']];
  assert.equal(await receptor.receberEntrega(lista, e3), 204);

  const naoEnvelope = '{"id":"x"}';
  assert.equal(await receptor.receberEntrega(cabecalhosDaSessao(naoEnvelope, { eventoId: 'x' }), naoEnvelope), 400);
  assert.deepEqual(
    receptor.descartes().map((d) => d.motivo),
    [MOTIVO.REPETIDO, MOTIVO.ASSINATURA_INVALIDA, MOTIVO.ASSINATURA_INVALIDA, MOTIVO.ENVELOPE_INVALIDO],
  );
});

test('receberEntrega: corpo acima do limite é 413, sem olhar a assinatura', async () => {
  const { receptor } = umReceptor({ limiteDoCorpo: 64 });
  const corpo = JSON.stringify(umEnvelope());
  assert.equal(await receptor.receberEntrega(cabecalhosDaSessao(corpo), corpo), 413);
  assert.deepEqual(receptor.descartes().map((d) => d.motivo), [MOTIVO.CORPO_GRANDE]);
});

// ---- O cliente contra um WebSocket falso. ----

/** Um WebSocket que o teste abre, alimenta e fecha na mão. */
class WebSocketFalso {
  static criados = [];

  constructor(url, opcoes) {
    this.url = url;
    this.opcoes = opcoes;
    this.readyState = 0;
    this.enviadas = [];
    this.fechadaCom = undefined;
    this.ouvintes = {};
    WebSocketFalso.criados.push(this);
  }

  addEventListener(tipo, fn) {
    (this.ouvintes[tipo] ??= []).push(fn);
  }

  send(dados) {
    if (this.readyState !== 1) throw new Error('não está aberta');
    this.enviadas.push(JSON.parse(dados));
  }

  /** Como um servidor que responde ao fechamento: o close vem logo depois. */
  close(codigo, motivo) {
    this.fechadaCom = { codigo, motivo };
    if (this.readyState >= 2) return;
    this.readyState = 2;
    setImmediate(() => {
      if (this.readyState !== 3) this.fechar(codigo ?? 1005, motivo ?? '');
    });
  }

  emitir(tipo, evento = {}) {
    for (const fn of this.ouvintes[tipo] ?? []) fn(evento);
  }

  abrir() {
    this.readyState = 1;
    this.emitir('open');
  }

  mandar(dados) {
    this.emitir('message', { data: typeof dados === 'string' ? dados : JSON.stringify(dados) });
  }

  fechar(code, reason = '') {
    this.readyState = 3;
    this.emitir('close', { code, reason });
  }

  /** Um handshake que falhou: erro e fechamento 1006, sem open. */
  falhar() {
    this.readyState = 3;
    this.emitir('error', { message: 'ECONNREFUSED' });
    this.emitir('close', { code: 1006, reason: '' });
  }

  /** Como o WebSocket do Node 20 num handshake recusado: só o error. */
  falharSoComErro() {
    this.readyState = 3;
    this.emitir('error', { message: 'Received network error or non-101 status code.' });
  }
}

/**
 * Uma sessão contra o WebSocket falso. `ultimo()` é o socket mais recente;
 * `estados` e `avisos` registram o que a sessão contou.
 */
function umaSessaoFalsa(t, opcoes = {}) {
  const criados = [];
  class Falso extends WebSocketFalso {
    constructor(...a) {
      super(...a);
      criados.push(this);
    }
  }
  const estados = [];
  const avisos = [];
  const { receptor, aplicados } = umReceptor(opcoes.receptor);
  const sessao = new SessaoGeohub({
    url: 'http://geohub.teste',
    apiKey: 'gk_teste',
    receptor,
    WebSocket: Falso,
    fetch: async () => ({ status: 400, text: async () => '{}' }),
    esperaMinimaMs: 10,
    esperaMaximaMs: 80,
    aoMudarEstado: (m) => estados.push(m),
    aoAviso: (texto) => avisos.push(texto),
    ...opcoes.sessao,
  });
  t.after(() => sessao.encerrar());
  return { sessao, receptor, aplicados, criados, ultimo: () => criados.at(-1), estados, avisos };
}

/** Uma mensagem da sessão para o envelope, assinada com SEGREDO. */
function umaMensagem(envelope = umEnvelope(), o = {}) {
  const corpo = JSON.stringify(envelope);
  return { ...cabecalhosDaSessao(corpo, o), corpo };
}

test('urlsDaSessao: http→ws, https→wss, com prefixo, sem query', () => {
  assert.deepEqual(urlsDaSessao('https://geohub.exemplo.gov.br'), {
    ws: 'wss://geohub.exemplo.gov.br/api/sessao',
    http: 'https://geohub.exemplo.gov.br/api/sessao',
  });
  assert.equal(urlsDaSessao('http://127.0.0.1:8080/').ws, 'ws://127.0.0.1:8080/api/sessao');
  assert.equal(urlsDaSessao('https://h.gov.br/geohub/?x=1#y').ws, 'wss://h.gov.br/geohub/api/sessao');
  assert.equal(urlsDaSessao('wss://h.gov.br/api/sessao').http, 'https://h.gov.br/api/sessao');
  assert.throws(() => urlsDaSessao('ftp://h.gov.br'), /esquema ftp:/u);
  assert.throws(() => urlsDaSessao('não é url'), /url inválida/u);
});

test('sem WebSocket, o erro diz o que fazer', (t) => {
  const original = Object.getOwnPropertyDescriptor(globalThis, 'WebSocket');
  delete globalThis.WebSocket;
  t.after(() => {
    if (original !== undefined) Object.defineProperty(globalThis, 'WebSocket', original);
  });
  const { receptor } = umReceptor();
  assert.throws(
    () => new SessaoGeohub({ url: 'http://h', apiKey: 'gk_x', receptor }),
    /--experimental-websocket.*opcoes\.WebSocket/su,
  );
  assert.throws(() => new SessaoGeohub({ url: 'http://h', receptor, WebSocket: WebSocketFalso }), /apiKey/u);
  assert.throws(() => new SessaoGeohub({ url: 'http://h', apiKey: 'gk_x', receptor: {}, WebSocket: WebSocketFalso }), /receptor/u);
});

test('a chave vai em Authorization; 2xx vira ack, o resto nack com o motivo', async (t) => {
  let falhar = false;
  const s = umaSessaoFalsa(t, {
    receptor: {
      aoAplicar: () => {
        if (falhar) throw new Error('banco fora do ar');
      },
    },
  });
  // Um receptor que lança: 500 com a mensagem, cortada (o Geohub lê no
  // máximo 4 KiB por resposta).
  const quebrado = umaSessaoFalsa(t, {
    sessao: {
      receptor: {
        receberEntrega: async () => {
          throw new Error('x'.repeat(10000));
        },
      },
    },
  });
  quebrado.sessao.iniciar();
  quebrado.ultimo().abrir();
  quebrado.ultimo().mandar(umaMensagem());
  await esperar('o nack do receptor que lança', () => quebrado.ultimo().enviadas.length === 1);
  assert.match(quebrado.ultimo().enviadas[0].motivo, /^500 o receptor falhou: x+$/u);
  assert.equal(quebrado.ultimo().enviadas[0].motivo.length, 500);

  s.sessao.iniciar();
  const ws = s.ultimo();
  assert.equal(ws.url, 'ws://geohub.teste/api/sessao');
  assert.deepEqual(ws.opcoes, { headers: { Authorization: 'Bearer gk_teste' } });
  ws.abrir();
  assert.equal(s.sessao.estado, ESTADO.CONECTADA);

  const boa = umaMensagem();
  ws.mandar(boa);
  const falha = umaMensagem(umEnvelope(), { agregado: 'ocorrencia:oc-2' });
  const errada = umaMensagem(umEnvelope(), { agregado: 'ocorrencia:oc-3', segredo: 'outro' });
  await esperar('o ack', () => ws.enviadas.length === 1);
  falhar = true;
  ws.mandar(falha);
  ws.mandar(errada);
  await esperar('as três respostas', () => ws.enviadas.length === 3);
  assert.deepEqual(ws.enviadas[0], { ack: boa['x-geohub-entrega-id'] });
  const porId = new Map(ws.enviadas.map((r) => [r.nack ?? r.ack, r]));
  assert.deepEqual(porId.get(falha['x-geohub-entrega-id']), { nack: falha['x-geohub-entrega-id'], motivo: '500 falha-ao-aplicar' });
  assert.deepEqual(porId.get(errada['x-geohub-entrega-id']), { nack: errada['x-geohub-entrega-id'], motivo: '401 assinatura-invalida' });
  assert.equal(s.aplicados.length, 1);
  assert.deepEqual(s.avisos, []);
});

test('um gancho de estado do receptor que falha vira nack 503 estado-indisponivel, nunca ack', async (t) => {
  let fora = true;
  const proximas = new Map();
  const s = umaSessaoFalsa(t, {
    receptor: {
      sequencias: {
        proxima: async (agregado) => {
          if (fora) throw new Error('banco fora do ar');
          return proximas.get(agregado);
        },
        definirProxima: async (agregado, n) => {
          proximas.set(agregado, n);
        },
      },
    },
  });
  s.sessao.iniciar();
  const ws = s.ultimo();
  ws.abrir();
  const m = umaMensagem();
  ws.mandar(m);
  await esperar('o nack', () => ws.enviadas.length === 1);
  assert.deepEqual(ws.enviadas[0], { nack: m['x-geohub-entrega-id'], motivo: '503 estado-indisponivel' });
  assert.equal(s.aplicados.length, 0);
  fora = false;
  const deNovo = { ...m, 'x-geohub-entrega-id': randomUUID() };
  ws.mandar(deNovo);
  await esperar('o ack', () => ws.enviadas.length === 2);
  assert.deepEqual(ws.enviadas[1], { ack: deNovo['x-geohub-entrega-id'] });
  assert.equal(proximas.get('ocorrencia:oc-1'), 2);
});

test('mensagem ilegível: avisada e ignorada, e a sessão segue', async (t) => {
  const s = umaSessaoFalsa(t);
  s.sessao.iniciar();
  const ws = s.ultimo();
  ws.abrir();
  ws.mandar('{isto não é json');
  ws.mandar('[1,2]');
  ws.mandar({ corpo: '{}' });
  ws.emitir('message', { data: new Blob(['x']) });
  const semCorpo = { 'x-geohub-entrega-id': 'e-sem-corpo' };
  ws.mandar(semCorpo);
  const boa = umaMensagem();
  ws.mandar(boa);
  await esperar('as respostas', () => ws.enviadas.length === 2);
  assert.deepEqual(ws.enviadas, [{ nack: 'e-sem-corpo', motivo: 'mensagem sem corpo' }, { ack: boa['x-geohub-entrega-id'] }]);
  assert.equal(s.avisos.length, 4, s.avisos.join('\n'));
  assert.match(s.avisos[0], /não é JSON/u);
  assert.equal(s.sessao.estado, ESTADO.CONECTADA);
  assert.equal(s.criados.length, 1);
});

test('a resposta vai só para a conexão de onde a entrega veio', async (t) => {
  let soltar;
  const s = umaSessaoFalsa(t, {
    receptor: {
      aoAplicar: () =>
        new Promise((r) => {
          soltar = r;
        }),
    },
  });
  s.sessao.iniciar();
  const primeira = s.ultimo();
  primeira.abrir();
  const m = umaMensagem();
  primeira.mandar(m);
  await esperar('o aoAplicar', () => soltar !== undefined);
  s.sessao.derrubar();
  assert.deepEqual(primeira.fechadaCom, { codigo: 1000, motivo: 'derrubada pelo CAD' });
  assert.equal(s.sessao.estado, ESTADO.AGUARDANDO);
  await esperar('a reconexão', () => s.criados.length === 2);
  const segunda = s.ultimo();
  segunda.abrir();
  soltar();
  await dormir(20);
  assert.deepEqual(primeira.enviadas, []);
  assert.deepEqual(segunda.enviadas, [], 'o ack de uma entrega da conexão anterior foi para a nova');
  // O Geohub manda de novo, com outro id de entrega: repetido, ack.
  const deNovo = { ...m, 'x-geohub-entrega-id': randomUUID() };
  segunda.mandar(deNovo);
  await esperar('o ack do reenvio', () => segunda.enviadas.length === 1);
  assert.deepEqual(segunda.enviadas, [{ ack: deNovo['x-geohub-entrega-id'] }]);
  assert.equal(s.aplicados.length, 1);
});

test('espera crescente até o teto, e volta ao mínimo depois de uma sessão que entregou', async (t) => {
  const s = umaSessaoFalsa(t);
  s.sessao.iniciar();
  for (let i = 1; i <= 5; i++) {
    await esperar(`a conexão ${i}`, () => s.criados.length === i);
    s.ultimo().falhar();
  }
  await esperar('a conexão 6', () => s.criados.length === 6);
  const esperas = () => s.estados.filter((e) => e.estado === ESTADO.AGUARDANDO).map((e) => e.esperaMs);
  assert.deepEqual(esperas(), [10, 20, 40, 80, 80]);
  // Uma sessão que entregou alguma coisa e caiu: de volta a 10.
  const ws = s.ultimo();
  ws.abrir();
  ws.mandar(umaMensagem());
  await esperar('o ack', () => ws.enviadas.length === 1);
  ws.fechar(1006);
  await esperar('a conexão 7', () => s.criados.length === 7);
  // O servidor encerrando (1001) também reconecta.
  s.ultimo().abrir();
  s.ultimo().fechar(1001, 'servidor encerrando');
  await esperar('a conexão 8', () => s.criados.length === 8);
  assert.deepEqual(esperas(), [10, 20, 40, 80, 80, 10, 20]);
  assert.deepEqual(s.estados.filter((e) => e.estado === ESTADO.AGUARDANDO).at(-1),
    { estado: ESTADO.AGUARDANDO, codigo: 1001, motivo: 'servidor encerrando', esperaMs: 20 });
});

for (const [codigo, motivo] of [
  [4000, 'substituída por uma nova sessão do mesmo integrador'],
  [1008, 'a chave de API deixou de valer (rotacionada ou revogada)'],
  [4001, 'este integrador recebe por callback, não por sessão'],
]) {
  test(`depois de ${codigo} não reconecta, e o fim diz o código e o motivo`, async (t) => {
    const s = umaSessaoFalsa(t);
    const fim = s.sessao.iniciar();
    s.ultimo().abrir();
    s.ultimo().fechar(codigo, motivo);
    assert.deepEqual(await fim, { codigo, motivo });
    assert.equal(s.sessao.estado, ESTADO.ENCERRADA);
    await dormir(50);
    assert.equal(s.criados.length, 1);
    assert.deepEqual(s.estados.at(-1), { estado: ESTADO.ENCERRADA, codigo, motivo });
  });
}

test('handshake recusado com 401: fim, sem reconectar; outra falha reconecta', async (t) => {
  let status = 503;
  const s = umaSessaoFalsa(t, {
    sessao: {
      fetch: async (url, { headers }) => {
        assert.equal(url, 'http://geohub.teste/api/sessao');
        assert.equal(headers.Authorization, 'Bearer gk_teste');
        return { status, text: async () => '{"erro":"chave de API inválida","codigo":"nao_autenticado"}' };
      },
    },
  });
  const fim = s.sessao.iniciar();
  s.ultimo().falhar();
  await esperar('a reconexão depois de um 503', () => s.criados.length === 2);
  s.ultimo().falharSoComErro();
  await esperar('a reconexão depois de um error sem close', () => s.criados.length === 3);
  // O motivo em português; o erro do WebSocket do Node, em inglês, no detalhe.
  const { motivo, detalhe } = s.estados.filter((e) => e.estado === ESTADO.AGUARDANDO).at(-1);
  assert.equal(motivo, 'o Geohub (ou um proxy na frente dele) respondeu HTTP 503: fora do ar ou sobrecarregado');
  assert.equal(detalhe, 'Received network error or non-101 status code.; GET http://geohub.teste/api/sessao: HTTP 503');
  status = 401;
  s.ultimo().falharSoComErro();
  assert.deepEqual(await fim, { codigo: 401, motivo: 'a chave de API foi recusada (HTTP 401): chave de API inválida' });
  await dormir(50);
  assert.equal(s.criados.length, 3);
});

test('servidor fora do ar: o motivo em português, o erro da biblioteca no detalhe', async (t) => {
  const s = umaSessaoFalsa(t, {
    sessao: {
      fetch: async () => {
        throw new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:8080') });
      },
    },
  });
  s.sessao.iniciar();
  // Como o WebSocket do Node num servidor fora do ar: error em inglês, e
  // (no Node 22) o close 1006.
  s.ultimo().falharSoComErro();
  s.ultimo().fechar(1006);
  await esperar('a reconexão', () => s.criados.length === 2);
  const aguardando = s.estados.filter((e) => e.estado === ESTADO.AGUARDANDO);
  assert.equal(aguardando.length, 1);
  assert.deepEqual(aguardando[0], {
    estado: ESTADO.AGUARDANDO,
    codigo: 1006,
    motivo: 'o Geohub não respondeu: fora do ar, ou sem rede até ele',
    detalhe: 'Received network error or non-101 status code.; GET http://geohub.teste/api/sessao: connect ECONNREFUSED 127.0.0.1:8080',
    esperaMs: 10,
  });
  assert.doesNotMatch(aguardando[0].motivo, /Received|network|status code/u);

  // Servidor de pé, mas o websocket não abre (um proxy que barra o upgrade):
  // a rota sem upgrade responde 400.
  const barrado = umaSessaoFalsa(t);
  barrado.sessao.iniciar();
  barrado.ultimo().falhar();
  await esperar('a reconexão', () => barrado.criados.length === 2);
  const b = barrado.estados.find((e) => e.estado === ESTADO.AGUARDANDO);
  assert.match(b.motivo, /^o websocket não abriu, mas o Geohub responde \(HTTP 400 sem upgrade\)/u);
  assert.equal(b.detalhe, 'ECONNREFUSED; GET http://geohub.teste/api/sessao: HTTP 400');

  // Uma conexão aberta que cai sem motivo do servidor (reason vazio).
  barrado.ultimo().abrir();
  barrado.ultimo().fechar(1006, '');
  await esperar('a reconexão', () => barrado.criados.length === 3);
  const queda = barrado.estados.filter((e) => e.estado === ESTADO.AGUARDANDO).at(-1);
  assert.equal(queda.motivo, 'a conexão caiu, sem fechamento do servidor');
  assert.equal(queda.detalhe, undefined);
  assert.equal('detalhe' in queda, false);
});

test('a espera volta ao mínimo depois de uma sessão que durou 30 s, mesmo sem entregas', async (t) => {
  let agora = Date.now();
  t.mock.method(Date, 'now', () => agora);
  const s = umaSessaoFalsa(t);
  s.sessao.iniciar();
  for (let i = 1; i <= 3; i++) {
    await esperar(`a conexão ${i}`, () => s.criados.length === i);
    s.ultimo().falhar();
  }
  await esperar('a conexão 4', () => s.criados.length === 4);
  // Aberta e derrubada antes dos 30 s, sem entregar nada: a espera cresce.
  s.ultimo().abrir();
  agora += 29999;
  s.ultimo().fechar(1006);
  await esperar('a conexão 5', () => s.criados.length === 5);
  // Aberta por 30 s, sem entregar nada: volta ao mínimo.
  s.ultimo().abrir();
  agora += 30000;
  s.ultimo().fechar(1006);
  await esperar('a conexão 6', () => s.criados.length === 6);
  const esperas = s.estados.filter((e) => e.estado === ESTADO.AGUARDANDO).map((e) => e.esperaMs);
  assert.deepEqual(esperas, [10, 20, 40, 80, 10]);
});

test('servidor calado: a conexão é largada e reaberta; mensagens mantêm a conexão viva', async (t) => {
  const s = umaSessaoFalsa(t, { sessao: { silencioMaximoMs: 120 } });
  s.sessao.iniciar();
  const ws = s.ultimo();
  ws.abrir();
  for (let i = 0; i < 4; i++) {
    await dormir(60);
    ws.mandar(umaMensagem());
  }
  assert.equal(s.criados.length, 1, 'largou uma conexão que recebia mensagens');
  await esperar('a conexão calada ser largada', () => s.criados.length === 2);
  assert.deepEqual(ws.fechadaCom, { codigo: 1000, motivo: 'sem mensagem nem ping do servidor' });
  assert.match(s.avisos.join('\n'), /dada por morta/u);
  // Um handshake que não termina também: nem open veio.
  await esperar('o handshake calado ser largado', () => s.criados.length === 3);
});

test('um ping (evento do ws) também conta como vida', async (t) => {
  const s = umaSessaoFalsa(t, { sessao: { silencioMaximoMs: 120 } });
  class ComPing extends WebSocketFalso {
    constructor(...a) {
      super(...a);
      this.pings = [];
      s.criados.push(this);
    }
    on(tipo, fn) {
      if (tipo === 'ping') this.pings.push(fn);
    }
  }
  const sessao = new SessaoGeohub({
    url: 'http://geohub.teste', apiKey: 'gk_teste', receptor: s.receptor, WebSocket: ComPing,
    silencioMaximoMs: 120, esperaMinimaMs: 10, aoAviso: () => {},
  });
  t.after(() => sessao.encerrar());
  sessao.iniciar();
  const ws = s.ultimo();
  ws.abrir();
  for (let i = 0; i < 4; i++) {
    await dormir(60);
    for (const fn of ws.pings) fn();
  }
  assert.equal(s.criados.length, 1);
  assert.equal(sessao.estado, ESTADO.CONECTADA);
});

test('encerrar fecha com 1000 e não reconecta; derrubar depois de encerrar não faz nada', async (t) => {
  const s = umaSessaoFalsa(t);
  const fim = s.sessao.iniciar();
  const ws = s.ultimo();
  ws.abrir();
  const encerrada = s.sessao.encerrar();
  assert.deepEqual(ws.fechadaCom, { codigo: 1000, motivo: 'encerrada pelo CAD' });
  s.sessao.derrubar();
  ws.fechar(1000);
  assert.deepEqual(await encerrada, { codigo: 1000, motivo: 'encerrada pelo CAD' });
  assert.equal(await fim, await encerrada);
  await dormir(30);
  assert.equal(s.criados.length, 1);
});

// ---- Contra um Geohub de verdade. ----

const BASE = process.env.GEOHUB_SESSAO_URL;
const TOKEN = process.env.GEOHUB_SESSAO_TOKEN;
const SEM_SERVIDOR =
  BASE && TOKEN
    ? false
    : 'sem GEOHUB_SESSAO_URL e GEOHUB_SESSAO_TOKEN: a parte contra um Geohub de verdade é pulada ' +
      '(TestJavaScriptSessionClient, em cmd/geohub, a roda)';
const SEM_WEBSOCKET_GLOBAL =
  typeof globalThis.WebSocket === 'function' ? false : 'sem globalThis.WebSocket: rode com node --experimental-websocket';

/** Um pedido à API com o token admin; falha com o corpo se o status não for `espera`. */
async function api(metodo, caminho, corpo, espera = 200) {
  const resposta = await fetch(new URL(caminho, BASE), {
    method: metodo,
    headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
    body: corpo === undefined ? undefined : JSON.stringify(corpo),
    signal: AbortSignal.timeout(10000),
  });
  const texto = await resposta.text();
  if (resposta.status !== espera) {
    throw new Error(`${metodo} ${caminho}: ${resposta.status} (esperado ${espera}): ${texto}`);
  }
  return texto === '' ? undefined : JSON.parse(texto);
}

/** Cadastra um integrador e o desativa no fim do teste. */
async function cadastrar(t, cadastro) {
  const criado = await api('POST', '/api/integradores', cadastro, 201);
  t.after(() => api('PATCH', `/api/integradores/${criado.id}`, { ativo: false }));
  return criado;
}

function cadastrarSessao(t, nome, eventos) {
  return cadastrar(t, { nome, entrega: 'sessao', eventos });
}

/** Publica um evento jornada:* no agregado; devolve o event_id. */
async function publicar(tipo, agregado) {
  const jornadaId = randomUUID();
  const payload =
    tipo === 'jornada:iniciada'
      ? { jornadaId, inicio: new Date().toISOString(), servidor: { nome: 'Ana', cpf: '12345678901' } }
      : { jornadaId, fim: new Date().toISOString() };
  const r = await api('POST', '/api/events', { tipo, origem: 'teste-sessao-js', agregado, payload }, 201);
  return r.event_id;
}

/** As entregas de um integrador em GET /api/entregas (uma página basta aqui). */
async function entregas(integrador) {
  const r = await api('GET', `/api/entregas?integrador=${encodeURIComponent(integrador)}&limite=500`);
  return r.linhas;
}

/**
 * Um CAD: o Receptor de referência atrás de uma SessaoGeohub, e o registro
 * de cada mensagem que chegou (com o número da conexão em que chegou).
 */
function umCad(t, cadastro, { aoAplicar, ...opcoes } = {}) {
  const receptor = new Receptor({
    segredos: [cadastro.segredo],
    integradorId: cadastro.id,
    maxHistorico: 10000,
    aoAplicar,
  });
  const recebidas = [];
  const estados = [];
  const avisos = [];
  let conexoes = 0;
  const sessao = new SessaoGeohub({
    url: BASE,
    apiKey: cadastro.api_key,
    receptor: {
      receberEntrega: (cabecalhos, corpo) => {
        recebidas.push({ ...cabecalhos, corpo, conexao: conexoes });
        return receptor.receberEntrega(cabecalhos, corpo);
      },
      descartes: () => receptor.descartes(),
    },
    esperaMinimaMs: 100,
    esperaMaximaMs: 1000,
    aoMudarEstado: (m) => {
      if (m.estado === ESTADO.CONECTADA) conexoes += 1;
      estados.push(m);
    },
    aoAviso: (texto) => avisos.push(texto),
    ...opcoes,
  });
  t.after(() => sessao.encerrar());
  const tentativas = () => estados.filter((e) => e.estado === ESTADO.CONECTANDO).length;
  const conectada = () => esperar('a sessão conectar', () => sessao.estado === ESTADO.CONECTADA,
    { descrever: () => JSON.stringify(estados) });
  return { sessao, receptor, recebidas, estados, avisos, tentativas, conectada, conexoes: () => conexoes };
}

/** Os aplicados do receptor no agregado, em ordem de aplicação. */
function aplicadosEm(cad, agregado) {
  return cad.receptor.aplicados().filter((a) => a.agregado === agregado);
}

/** As sequências das mensagens que chegaram do agregado, em ordem de chegada. */
function chegadasEm(cad, agregado) {
  return cad.recebidas.filter((m) => m['x-geohub-agregado'] === agregado);
}

const seqs = (lista) => lista.map((x) => Number(x.sequencia ?? x['x-geohub-sequencia']));

/** Um teste contra o servidor, com prazo próprio (o da suíte é a soma). */
const vivo = (nome, fn) => test(nome, { timeout: 60000 }, fn);

test.describe('contra um Geohub de verdade', { skip: SEM_SERVIDOR || SEM_WEBSOCKET_GLOBAL }, () => {
  vivo('a: 3 agregados × 10 eventos — assinatura conferida, cada agregado 1..10 em ordem, 30 entregues', async (t) => {
    const cadastro = await cadastrarSessao(t, 'CAD sessão (a)', ['jornada:iniciada']);
    const cad = umCad(t, cadastro);
    cad.sessao.iniciar();
    await cad.conectada();

    const agregados = [1, 2, 3].map(() => `jornada:${randomUUID()}`);
    const publicados = new Map(agregados.map((a) => [a, []]));
    for (let i = 1; i <= 10; i++) {
      for (const a of agregados) publicados.get(a).push(await publicar('jornada:iniciada', a));
    }
    await esperar('os 30 aplicados', () => cad.receptor.aplicados().length >= 30, {
      descrever: () => `${cad.receptor.aplicados().length} aplicados, descartes ${JSON.stringify(cad.receptor.descartes())}`,
    });
    assert.deepEqual(cad.receptor.descartes(), [], 'cada assinatura confere, nada descartado');
    for (const a of agregados) {
      const aplicados = aplicadosEm(cad, a);
      assert.deepEqual(seqs(aplicados), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], a);
      assert.deepEqual(aplicados.map((x) => x.id), publicados.get(a), `${a}: os envelopes, na ordem publicada`);
    }
    for (const m of cad.recebidas) {
      assert.match(m['x-geohub-assinatura'], /^sha256=[0-9a-f]{64}$/u);
      assert.match(m['webhook-signature'], /^v1,/u);
      assert.equal(m['webhook-id'], m['x-geohub-evento-id']);
      assert.equal(JSON.parse(m.corpo).id, m['x-geohub-evento-id']);
    }
    await esperar('as 30 entregas como entregue em /api/entregas', async () => {
      const linhas = await entregas(cadastro.id);
      return linhas.length === 30 && linhas.every((l) => l.status === 'entregue');
    }, { descrever: async () => JSON.stringify((await entregas(cadastro.id)).map((l) => l.status)) });
    const linhas = await entregas(cadastro.id);
    for (const a of agregados) assert.equal(linhas.filter((l) => l.agregado === a).length, 10, a);
    assert.deepEqual(cad.avisos, []);
    assert.equal(cad.conexoes(), 1, 'a sessão não caiu');
  });

  vivo('b: uma entrega sem resposta segura o seu agregado, só ele; depois da queda, vem de novo e o resto em ordem', async (t) => {
    const cadastro = await cadastrarSessao(t, 'CAD sessão (b)', ['jornada:iniciada']);
    const retido = `jornada:${randomUUID()}`;
    const outros = [`jornada:${randomUUID()}`, `jornada:${randomUUID()}`];
    let soltar;
    const cad = umCad(t, cadastro, {
      aoAplicar: (envelope, entrega) => {
        if (entrega.agregado === retido && entrega.sequencia === 3 && soltar === undefined) {
          return new Promise((_, rejeitar) => {
            soltar = rejeitar;
          });
        }
        return undefined;
      },
    });
    cad.sessao.iniciar();
    await cad.conectada();

    const ids = [];
    for (let i = 1; i <= 6; i++) ids.push(await publicar('jornada:iniciada', retido));
    await esperar('a 3 ficar sem resposta', () => soltar !== undefined);
    // Sem resposta em 5 s é um timeout, e o timeout solta a 4: o que segue
    // tem que caber nesse prazo.
    const retidaEm = Date.now();
    for (let i = 1; i <= 5; i++) {
      for (const a of outros) await publicar('jornada:iniciada', a);
    }
    await esperar('os outros agregados chegarem inteiros', () => outros.every((a) => aplicadosEm(cad, a).length === 5), {
      descrever: () => outros.map((a) => seqs(aplicadosEm(cad, a))).join(' / '),
    });
    const decorrido = Date.now() - retidaEm;
    assert.ok(decorrido < 4500, `os outros levaram ${decorrido} ms: perto demais do timeout de 5 s para provar alguma coisa`);
    for (const a of outros) assert.deepEqual(seqs(aplicadosEm(cad, a)), [1, 2, 3, 4, 5], a);
    assert.deepEqual(seqs(chegadasEm(cad, retido)), [1, 2, 3], 'a 4 chegou com a 3 sem resposta');
    assert.deepEqual(seqs(aplicadosEm(cad, retido)), [1, 2]);
    const primeira = chegadasEm(cad, retido)[2];

    cad.sessao.derrubar();
    // O aoAplicar da 3 falha depois da queda: a resposta (um nack) não tem
    // mais para onde ir, e a 3 tem que ser aplicada pelo reenvio.
    soltar(new Error('o CAD caiu no meio'));
    await esperar('o agregado retido chegar até a 6', () => aplicadosEm(cad, retido).length === 6, {
      descrever: () => `aplicados ${seqs(aplicadosEm(cad, retido))}, chegadas ${seqs(chegadasEm(cad, retido))}`,
    });
    const chegadas = chegadasEm(cad, retido);
    assert.deepEqual(seqs(chegadas), [1, 2, 3, 3, 4, 5, 6]);
    const deNovo = chegadas[3];
    assert.equal(deNovo.conexao, 2, 'o reenvio chegou pela conexão nova');
    assert.deepEqual(chegadas.filter((m) => m.conexao === 2).map((m) => Number(m['x-geohub-sequencia'])), [3, 4, 5, 6]);
    assert.equal(deNovo.corpo, primeira.corpo, 'o mesmo corpo, byte a byte');
    assert.equal(deNovo['x-geohub-evento-id'], primeira['x-geohub-evento-id']);
    assert.notEqual(deNovo['x-geohub-entrega-id'], primeira['x-geohub-entrega-id'], 'um novo x-geohub-entrega-id');
    assert.deepEqual(seqs(aplicadosEm(cad, retido)), [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(aplicadosEm(cad, retido).map((a) => a.id), ids, 'cada envelope aplicado uma vez, em ordem');
    assert.deepEqual(cad.receptor.descartes().filter((d) => d.motivo !== MOTIVO.FALHA_AO_APLICAR && d.motivo !== MOTIVO.REPETIDO), []);
    await esperar('as 16 entregas como entregue', async () => {
      const linhas = await entregas(cadastro.id);
      return linhas.length === 16 && linhas.every((l) => l.status === 'entregue');
    }, { descrever: async () => JSON.stringify((await entregas(cadastro.id)).map((l) => [l.agregado.slice(-4), l.sequencia, l.status])) });
  });

  vivo('c: a chave de outro integrador não recebe nada das entregas do primeiro', async (t) => {
    const cadastroA = await cadastrarSessao(t, 'CAD sessão (c) A', ['jornada:iniciada']);
    const cadastroB = await cadastrarSessao(t, 'CAD sessão (c) B', ['jornada:encerrada']);
    const a = umCad(t, cadastroA);
    const b = umCad(t, cadastroB);
    a.sessao.iniciar();
    b.sessao.iniciar();
    await a.conectada();
    await b.conectada();

    const deA = `jornada:${randomUUID()}`;
    const deB = `jornada:${randomUUID()}`;
    const idsA = [];
    const idsB = [];
    for (let i = 1; i <= 5; i++) {
      idsA.push(await publicar('jornada:iniciada', deA));
      idsB.push(await publicar('jornada:encerrada', deB));
    }
    await esperar('as 5 de cada um entregues', async () => {
      const [la, lb] = await Promise.all([entregas(cadastroA.id), entregas(cadastroB.id)]);
      return la.length === 5 && lb.length === 5 && [...la, ...lb].every((l) => l.status === 'entregue');
    });
    assert.deepEqual(a.receptor.aplicados().map((x) => x.id), idsA);
    assert.deepEqual(b.receptor.aplicados().map((x) => x.id), idsB);
    assert.ok(a.recebidas.every((m) => m['x-geohub-agregado'] === deA && JSON.parse(m.corpo).tipo === 'jornada:iniciada'));
    assert.ok(b.recebidas.every((m) => m['x-geohub-agregado'] === deB && JSON.parse(m.corpo).tipo === 'jornada:encerrada'));
    // Assinada com o segredo de A, uma entrega de A na sessão de B seria
    // descartada pelo receptor de B.
    assert.deepEqual(a.receptor.descartes(), []);
    assert.deepEqual(b.receptor.descartes(), []);
    const entregaIdsDeA = new Set(a.recebidas.map((m) => m['x-geohub-entrega-id']));
    assert.ok(b.recebidas.every((m) => !entregaIdsDeA.has(m['x-geohub-entrega-id'])));
    assert.ok((await entregas(cadastroA.id)).every((l) => l.agregado === deA));
    assert.ok((await entregas(cadastroB.id)).every((l) => l.agregado === deB));
  });

  vivo('d: chave de um integrador por callback fecha com 4001, sem reconectar', async (t) => {
    let criado;
    try {
      criado = await cadastrar(t, {
        nome: 'CAD por callback (d)',
        callback_url: 'http://127.0.0.1:9/geohub/eventos',
        hosts_permitidos: ['127.0.0.1'],
        eventos: ['integracao:teste'],
      });
    } catch (erro) {
      throw new Error(`${erro.message}\n(o servidor precisa de --insecure-callbacks, ou --demo, para este cadastro)`);
    }
    const cad = umCad(t, criado);
    const fim = await cad.sessao.iniciar();
    assert.equal(fim.codigo, CODIGO.NAO_E_SESSAO, JSON.stringify(fim));
    assert.match(fim.motivo, /callback/u);
    await dormir(300); // três esperas mínimas: uma reconexão já teria começado
    assert.equal(cad.tentativas(), 1);
    assert.equal(cad.sessao.estado, ESTADO.ENCERRADA);
  });

  vivo('d: uma segunda sessão com a mesma chave substitui a primeira (4000), que para', async (t) => {
    const cadastro = await cadastrarSessao(t, 'CAD sessão (d)', ['jornada:iniciada']);
    const primeira = umCad(t, cadastro);
    const segunda = umCad(t, cadastro);
    const fimDaPrimeira = primeira.sessao.iniciar();
    await primeira.conectada();
    segunda.sessao.iniciar();
    const fim = await fimDaPrimeira;
    assert.equal(fim.codigo, CODIGO.SUBSTITUIDA, JSON.stringify(fim));
    await segunda.conectada();
    await dormir(300);
    assert.equal(primeira.tentativas(), 1, 'a substituída reconectou');
    assert.equal(segunda.sessao.estado, ESTADO.CONECTADA);
    assert.equal(segunda.tentativas(), 1);
    // E a que ficou recebe.
    const agregado = `jornada:${randomUUID()}`;
    const id = await publicar('jornada:iniciada', agregado);
    await esperar('a entrega na sessão que ficou', () => segunda.receptor.aplicados().some((a) => a.id === id));
    assert.deepEqual(primeira.recebidas, []);
  });

  vivo('d: a api_key rotacionada fecha a sessão com 1008, sem reconectar; uma chave inválida termina com 401', async (t) => {
    const cadastro = await cadastrarSessao(t, 'CAD sessão (d, rotação)', ['jornada:iniciada']);
    const cad = umCad(t, cadastro);
    const fim = cad.sessao.iniciar();
    await cad.conectada();
    const rotacionada = await api('POST', `/api/integradores/${cadastro.id}/api_key/rotacionar`);
    assert.ok(typeof rotacionada === 'object');
    const f = await fim;
    assert.equal(f.codigo, CODIGO.POLITICA, JSON.stringify(f));
    await dormir(300);
    assert.equal(cad.tentativas(), 1);

    const invalida = umCad(t, { ...cadastro, api_key: cadastro.api_key });
    const fimInvalida = await invalida.sessao.iniciar();
    assert.equal(fimInvalida.codigo, CODIGO.CHAVE_RECUSADA, JSON.stringify(fimInvalida));
    assert.match(fimInvalida.motivo, /chave de API/u);
    await dormir(300);
    assert.equal(invalida.tentativas(), 1);
  });
});
