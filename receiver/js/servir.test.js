'use strict';
// O protocolo do harness testdata/servir.js, que o teste de ponta a ponta em
// Go inicia: argumentos, a linha do stdout, as rotas e as formas do JSON.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { once } = require('node:events');

const { umEnvelope, pedir, cabecalhosDoGeohub } = require('./testdata/ajuda.js');

const SERVIR = path.join(__dirname, 'testdata', 'servir.js');
const agora = () => Math.floor(Date.now() / 1000);

/** Inicia o harness com stdin em pipe e espera a linha {"porta":N}. */
async function iniciar(t, implementacao) {
  const filho = spawn(process.execPath, [SERVIR, '--implementacao', implementacao], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const saiu = once(filho, 'exit');
  t.after(async () => {
    if (filho.exitCode === null && filho.signalCode === null) filho.kill('SIGTERM');
    await saiu;
  });
  let saida = '';
  filho.stdout.setEncoding('utf8');
  filho.stdout.on('data', (d) => {
    saida += d;
  });
  while (!saida.includes('\n')) {
    await Promise.race([once(filho.stdout, 'data'), saiu.then(() => assert.fail('o harness saiu antes de escutar'))]);
  }
  const linhas = saida.split('\n');
  assert.match(linhas[0], /^\{"porta":[1-9][0-9]*\}$/u);
  const { porta } = JSON.parse(linhas[0]);
  const json = async (metodo, caminho, corpo) => {
    const r = await pedir(porta, { metodo, caminho, corpo: corpo === undefined ? undefined : JSON.stringify(corpo) });
    return { status: r.status, json: r.corpo === '' ? undefined : JSON.parse(r.corpo) };
  };
  const evento = async (envelope, o) => {
    const corpo = JSON.stringify(envelope);
    const cabecalhos = cabecalhosDoGeohub(corpo, { ts: agora(), eventoId: envelope.id, ...o });
    return (await pedir(porta, { corpo, cabecalhos })).status;
  };
  return { filho, saiu, porta, json, evento, saida: () => saida };
}

for (const implementacao of ['seed000', 'referencia']) {
  test(`servir ${implementacao}: uma linha {"porta":N}, /configurar, /geohub/eventos e /estado`, async (t) => {
    const h = await iniciar(t, implementacao);
    const e1 = umEnvelope();
    const e2 = umEnvelope({ tipo: 'ocorrencia:despachada', payload: { despacho: { id: 'd-1', ocorrenciaId: 'oc-1', recurso: { identificador: 'UR-12' }, status: 'em_deslocamento' } } });

    // Antes de configurar, 503 (o Geohub tenta de novo).
    assert.equal(await h.evento(e1, { segredo: 's1', sequencia: 1 }), 503);
    assert.equal((await h.json('POST', '/configurar', { nada: 1 })).status, 400);
    assert.equal((await h.json('POST', '/configurar', { segredo: 's1', integradorId: 'cad-1' })).status, 204);

    assert.equal(await h.evento(e1, { segredo: 's1', sequencia: 1 }), 204);
    assert.equal(await h.evento(e1, { segredo: 's1', sequencia: 1 }), 204); // repetido
    assert.equal(await h.evento(e2, { segredo: 's1', sequencia: 2 }), 204);
    assert.equal(await h.evento(umEnvelope(), { segredo: 'errado', sequencia: 3 }), 401);
    const semAutoria = umEnvelope();
    delete semAutoria.origem.autoria;
    assert.equal(await h.evento(semAutoria, { segredo: 's1', sequencia: 3 }), 400);
    const eco = umEnvelope({ origem: { ...e1.origem, autoria: { id: 'cad-1', tipo: 'integrador' } } });
    assert.equal(await h.evento(eco, { segredo: 's1', agregado: 'ocorrencia:outra', sequencia: 1 }), 204);

    const { status, json: estado } = await h.json('GET', '/estado');
    assert.equal(status, 200);
    assert.deepEqual(Object.keys(estado).sort(), ['aplicados', 'descartes', 'despachos', 'espera', 'ocorrencias', 'status']);
    assert.deepEqual(estado.aplicados, [
      { id: e1.id, tipo: e1.tipo, agregado: 'ocorrencia:oc-1', sequencia: 1 },
      { id: e2.id, tipo: e2.tipo, agregado: 'ocorrencia:oc-1', sequencia: 2 },
    ]);
    assert.equal(estado.espera, 0);
    assert.deepEqual(estado.descartes.map((d) => d.motivo), ['repetido', 'assinatura-invalida', 'envelope-invalido', 'eco-proprio']);
    assert.equal(estado.descartes[0].eventoId, e1.id);
    assert.deepEqual(estado.status, { 204: 4, 401: 1, 400: 1, 503: 1 });
    assert.deepEqual(estado.despachos['d-1'], { despachoId: 'd-1', ocorrenciaId: 'oc-1', recurso: 'UR-12', status: 'em_deslocamento' });
    assert.equal(h.saida().split('\n').filter(Boolean).length, 1, 'uma linha só no stdout');
  });

  test(`servir ${implementacao}: sai quando o stdin fecha, e com SIGTERM`, async (t) => {
    const a = await iniciar(t, implementacao);
    a.filho.stdin.end();
    const [codigo] = await a.saiu;
    assert.equal(codigo, 0);
    const b = await iniciar(t, implementacao);
    b.filho.kill('SIGTERM');
    const [codigoB] = await b.saiu;
    assert.equal(codigoB, 0);
  });
}

test('servir referencia: /configurar troca o segredo, que passa a ser o único', async (t) => {
  const h = await iniciar(t, 'referencia');
  await h.json('POST', '/configurar', { segredo: 'antigo', integradorId: 'cad-1' });
  // Tem só o antigo: o Geohub assina com o novo e põe o antigo em -Anterior.
  assert.equal(await h.evento(umEnvelope(), { segredo: 'novo', anterior: 'antigo', sequencia: null }), 204);
  assert.equal(await h.evento(umEnvelope(), { segredo: 'novo', sequencia: null }), 401);
  await h.json('POST', '/configurar', { segredo: 'novo' });
  assert.equal(await h.evento(umEnvelope(), { segredo: 'antigo', sequencia: null }), 401);
  assert.equal(await h.evento(umEnvelope(), { segredo: 'novo', sequencia: null }), 204);
  assert.equal(await h.evento(umEnvelope(), { segredo: 'antigo', anterior: 'novo', sequencia: null }), 204);
  // O id do cadastro ficou: o eco continua eco.
  const eco = umEnvelope({ origem: { ...umEnvelope().origem, autoria: { id: 'cad-1', tipo: 'integrador' } } });
  assert.equal(await h.evento(eco, { segredo: 'novo', sequencia: null }), 204);
  const { json: estado } = await h.json('GET', '/estado');
  assert.equal(estado.aplicados.length, 3);
  assert.equal(estado.aplicados[0].sequencia, null);
  assert.equal(estado.descartes.at(-1).motivo, 'eco-proprio');
});

test('servir referencia: os adiantados contam em "espera" e drenam com a linha de base 0', async (t) => {
  const h = await iniciar(t, 'referencia');
  await h.json('POST', '/configurar', { segredo: 's', integradorId: 'cad-1' });
  const [e1, e2, e3] = [umEnvelope(), umEnvelope(), umEnvelope()];
  await h.evento(e3, { segredo: 's', sequencia: 3 });
  await h.evento(e2, { segredo: 's', sequencia: 2 });
  assert.equal((await h.json('GET', '/estado')).json.espera, 2);
  await h.evento(e1, { segredo: 's', sequencia: 1 });
  const { json: estado } = await h.json('GET', '/estado');
  assert.equal(estado.espera, 0);
  assert.deepEqual(estado.aplicados.map((a) => a.sequencia), [1, 2, 3]);
});

test('servir seed000: /configurar troca o segredo do guia; "espera" conta os adiantados dele', async (t) => {
  const h = await iniciar(t, 'seed000');
  await h.json('POST', '/configurar', { segredo: 'antigo', integradorId: 'cad-1' });
  assert.equal(await h.evento(umEnvelope(), { segredo: 'antigo', sequencia: 1 }), 204);
  // O guia só lê X-Geohub-Assinatura.
  assert.equal(await h.evento(umEnvelope(), { segredo: 'novo', anterior: 'antigo', sequencia: 2 }), 401);
  await h.json('POST', '/configurar', { segredo: 'novo' });
  assert.equal(await h.evento(umEnvelope(), { segredo: 'novo', sequencia: 2 }), 204);
  assert.equal(await h.evento(umEnvelope(), { segredo: 'novo', sequencia: 4 }), 204);
  const { json: estado } = await h.json('GET', '/estado');
  assert.equal(estado.espera, 1);
  assert.deepEqual(estado.aplicados.map((a) => a.sequencia), [1, 2]);
});

test('servir: implementação desconhecida sai com 2', async () => {
  const filho = spawn(process.execPath, [SERVIR, '--implementacao', 'outra'], { stdio: ['pipe', 'pipe', 'pipe'] });
  const [codigo] = await once(filho, 'exit');
  assert.equal(codigo, 2);
});
