'use strict';
// O código do guia (testdata/seed000.js), como foi publicado: o que ele faz
// com o que o Geohub manda, defeitos incluídos. Estes testes fixam o
// comportamento que o teste de ponta a ponta em Go encontra, e mostram
// onde o receptor de referência (receptor.js) difere.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { ReceptorDoGuia, ehEnvelope } = require('./testdata/seed000.js');
const { umEnvelope, servir, pedir, cabecalhosDoGeohub } = require('./testdata/ajuda.js');

const SEGREDO = 'whsec-atual';
const ANTIGO = 'whsec-antigo';
const EU = 'cad-1';
const agora = () => Math.floor(Date.now() / 1000);

/** O guia servido como o servir.js o serve: o status do receber, sem corpo. */
async function montar(t, Classe = ReceptorDoGuia, opcoes = { segredo: SEGREDO, integradorId: EU }) {
  const guia = new Classe(opcoes);
  const erros = [];
  const porta = await servir(t, async (req, res) => {
    let status;
    try {
      status = await guia.receber(req);
    } catch (erro) {
      erros.push(erro);
      status = 500;
    }
    res.writeHead(status);
    res.end();
  });
  const enviar = async (envelopeOuCorpo, o = {}) => {
    const corpo = typeof envelopeOuCorpo === 'string' ? envelopeOuCorpo : JSON.stringify(envelopeOuCorpo);
    const cabecalhos = cabecalhosDoGeohub(corpo, { segredo: SEGREDO, ts: agora(), sequencia: 1, ...o });
    return (await pedir(porta, { corpo, cabecalhos })).status;
  };
  return { guia, enviar, erros, ids: () => guia.aplicados.map((e) => e.id) };
}

test('seed000: o código JavaScript do guia confere os vetores de assinatura', (t) => {
  const vetores = JSON.parse(fs.readFileSync(path.join(__dirname, 'testdata', 'assinatura.json'), 'utf8'));
  for (const caso of vetores.casos) {
    t.mock.method(Date, 'now', () => Number(caso.timestamp) * 1000);
    const guia = new ReceptorDoGuia({ segredo: caso.segredo, integradorId: EU });
    const cabecalhos = { 'x-geohub-timestamp': caso.timestamp, 'x-geohub-assinatura': caso.assinatura };
    assert.equal(guia.assinaturaConfere(cabecalhos, caso.corpo), true, caso.nome);
    t.mock.restoreAll();
  }
});

test('seed000: ehEnvelope aceita o que o Geohub manda, com e sem solicitacao', () => {
  const vetores = JSON.parse(fs.readFileSync(path.join(__dirname, 'testdata', 'assinatura.json'), 'utf8'));
  assert.equal(ehEnvelope(JSON.parse(vetores.casos[0].corpo)), true);
  const semSolicitacao = umEnvelope();
  delete semSolicitacao.origem.solicitacao;
  assert.equal(ehEnvelope(semSolicitacao), true);
  assert.equal(ehEnvelope(null), false);
});

test('seed000: envelope SEM origem.autoria responde 400, porque o ehEnvelope preenchido a exige', async (t) => {
  const { enviar, ids, guia } = await montar(t);
  for (const plugin of ['ocorrencia', 'integracao']) {
    const e = umEnvelope();
    e.origem.plugin = plugin;
    delete e.origem.autoria;
    assert.equal(await enviar(e, { sequencia: null }), 400, plugin);
  }
  assert.deepEqual(ids(), []);
  assert.deepEqual(guia.descartes.map((d) => d.motivo), ['envelope-invalido', 'envelope-invalido']);
});

test('seed000: com um ehEnvelope que não exigisse autoria, o receber do guia quebraria (500)', async (t) => {
  // O mesmo arquivo, só com um ehEnvelope frouxo (id, tipo, origem, payload).
  const original = fs.readFileSync(path.join(__dirname, 'testdata', 'seed000.js'), 'utf8');
  const fonte = original.replace(
    'function ehEnvelope(x) {\n  return (',
    "function ehEnvelope(x) {\n  return typeof x === 'object' && x !== null && typeof x.origem === 'object' && typeof x.payload === 'object';\n  return (",
  );
  assert.notEqual(fonte, original);
  const modulo = { exports: {} };
  new Function('require', 'module', 'exports', fonte)(require, modulo, modulo.exports);
  const { enviar, erros, guia } = await montar(t, modulo.exports.ReceptorDoGuia);

  const semAutoria = umEnvelope();
  delete semAutoria.origem.autoria;
  assert.equal(await enviar(semAutoria, { sequencia: null }), 500);
  assert.equal(erros.length, 1);
  assert.ok(erros[0] instanceof TypeError);
  assert.match(erros[0].message, /reading 'tipo'/u);
  // O envelope já foi marcado como visto antes de quebrar: o reenvio do
  // Geohub é "repetido" e o evento se perde sem ser aplicado.
  assert.equal(await enviar(semAutoria, { sequencia: null }), 204);
  assert.deepEqual(guia.aplicados, []);

  // Com plugin integracao o && para antes de ler autoria: aplica.
  const desfecho = umEnvelope({ tipo: 'integracao:comando-concluido' });
  desfecho.origem.plugin = 'integracao';
  delete desfecho.origem.autoria;
  assert.equal(await enviar(desfecho, { sequencia: null }), 204);
  assert.deepEqual(guia.aplicados.map((e) => e.id), [desfecho.id]);
});

test('seed000: responde 204 ao aceito, ao repetido e ao eco; aplica integracao:* do próprio CAD', async (t) => {
  const { enviar, ids, guia } = await montar(t);
  const e = umEnvelope();
  assert.equal(await enviar(e), 204);
  assert.equal(await enviar(e), 204);
  const autoria = { id: EU, tipo: 'integrador' };
  const eco = umEnvelope({ origem: { ...e.origem, autoria } });
  assert.equal(await enviar(eco, { agregado: 'ocorrencia:x', sequencia: 1 }), 204);
  const desfecho = umEnvelope({ tipo: 'integracao:comando-concluido', origem: { ...e.origem, autoria, plugin: 'integracao' } });
  assert.equal(await enviar(desfecho, { agregado: 'solicitacao:s', sequencia: 1 }), 204);
  assert.deepEqual(ids(), [e.id, desfecho.id]);
  assert.deepEqual(guia.descartes.map((d) => d.motivo), ['repetido', 'eco-proprio']);
});

test('seed000: 401 para assinatura errada e fora da janela de ±5 min', async (t) => {
  const { enviar, guia } = await montar(t);
  assert.equal(await enviar(umEnvelope(), { segredo: 'outro' }), 401);
  assert.equal(await enviar(umEnvelope(), { ts: agora() - 400 }), 401);
  assert.equal(await enviar(umEnvelope(), { ts: agora() + 400 }), 401);
  assert.equal(await enviar(umEnvelope(), { ts: agora() - 200 }), 204);
  assert.equal(await enviar(umEnvelope(), { ts: agora() + 200, sequencia: 2 }), 204);
  assert.deepEqual(guia.descartes.map((d) => d.motivo), ['assinatura-invalida', 'timestamp-fora-da-janela', 'timestamp-fora-da-janela']);
});

test('seed000 (defeito): só lê X-Geohub-Assinatura — o segredo certo em -Anterior não basta', async (t) => {
  const { enviar } = await montar(t, ReceptorDoGuia, { segredo: ANTIGO, integradorId: EU });
  assert.equal(await enviar(umEnvelope(), { segredo: SEGREDO, anterior: ANTIGO }), 401);
  assert.equal(await enviar(umEnvelope(), { segredo: ANTIGO, anterior: SEGREDO }), 204);
});

test('seed000 (defeito): a primeira chegada vira a linha de base — a 3 sozinha é aplicada', async (t) => {
  const { enviar, ids } = await montar(t);
  const [e1, e3] = [umEnvelope(), umEnvelope()];
  assert.equal(await enviar(e3, { sequencia: 3 }), 204);
  assert.deepEqual(ids(), [e3.id]);
  // E a 1 que chega depois é aplicada atrás dela, voltando a sequência.
  assert.equal(await enviar(e1, { sequencia: 1 }), 204);
  assert.deepEqual(ids(), [e3.id, e1.id]);
  const e4 = umEnvelope();
  assert.equal(await enviar(e4, { sequencia: 4 }), 204);
  assert.deepEqual(ids(), [e3.id, e1.id], 'com a sequência voltada para 1, a 4 fica esperando');
});

test('seed000: em ordem a partir de 1, o buraco espera e o drenar (chute) aplica na ordem de chegada', async (t) => {
  const { enviar, ids, guia } = await montar(t);
  const e = [null, umEnvelope(), umEnvelope(), umEnvelope(), umEnvelope(), umEnvelope()];
  await enviar(e[1], { sequencia: 1 });
  await enviar(e[3], { sequencia: 3 });
  await enviar(e[4], { sequencia: 4 });
  assert.deepEqual(ids(), [e[1].id]);
  assert.equal(guia.espera.get('ocorrencia:oc-1').length, 2);
  await enviar(e[2], { sequencia: 2 });
  await enviar(e[5], { sequencia: 5 });
  assert.deepEqual(ids(), [1, 2, 3, 4, 5].map((s) => e[s].id));
  assert.equal(guia.sequencias.get('ocorrencia:oc-1'), 5);
});

test('seed000 (defeito): o eco não consome a sua sequência — o que vem depois dele espera para sempre', async (t) => {
  const { enviar, ids, guia } = await montar(t);
  const autoria = { id: EU, tipo: 'integrador' };
  const [e1, e3] = [umEnvelope(), umEnvelope()];
  const eco = umEnvelope({ origem: { ...e1.origem, autoria } });
  await enviar(e1, { sequencia: 1 });
  await enviar(eco, { sequencia: 2 });
  await enviar(e3, { sequencia: 3 });
  assert.deepEqual(ids(), [e1.id]);
  assert.equal(guia.espera.get('ocorrencia:oc-1').length, 1);
});

test('seed000 (defeito): corpo assinado que não é JSON quebra o receber (JSON.parse sem try): 500', async (t) => {
  const { enviar, erros } = await montar(t);
  assert.equal(await enviar('isto não é json'), 500);
  assert.ok(erros[0] instanceof SyntaxError);
});

test('seed000: a projeção por despacho do guia', async (t) => {
  const { enviar, guia } = await montar(t);
  const despacho = { id: 'd-1', ocorrenciaId: 'oc-1', recurso: { identificador: 'UR-12' }, status: 'em_deslocamento' };
  await enviar(umEnvelope({ tipo: 'ocorrencia:despachada', payload: { despacho } }), { sequencia: 1 });
  await enviar(umEnvelope({ tipo: 'ocorrencia:despacho-mudou-status', payload: { id: 'd-1', ocorrenciaId: 'oc-1', de: 'em_deslocamento', para: 'no_local' } }), { sequencia: 2 });
  await enviar(umEnvelope({ tipo: 'ocorrencia:mudou-status', payload: { id: 'oc-1', de: 'aberta', para: 'em_atendimento' } }), { sequencia: 3 });
  assert.deepEqual(guia.despacho('d-1'), { despachoId: 'd-1', ocorrenciaId: 'oc-1', recurso: 'UR-12', status: 'no_local' });
  assert.equal(guia.ocorrencias.get('oc-1'), 'em_atendimento');
});
