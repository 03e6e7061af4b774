'use strict';
// Ajudantes dos testes: envelopes, pedidos assinados e um servidor node:http
// de verdade em 127.0.0.1.

const http = require('node:http');
const { randomUUID } = require('node:crypto');
const { assinar } = require('../receptor.js');

/** Um envelope como o Geohub manda; `mudar` sobrescreve campos. */
function umEnvelope(mudar = {}) {
  return {
    id: randomUUID(),
    ocorridoEm: '2026-10-31T12:04:11.000Z',
    origem: {
      autoria: { id: 'operador-1', tipo: 'usuario' },
      plugin: 'ocorrencia',
      solicitacao: randomUUID(),
      versao: '1.0.0',
    },
    payload: { id: 'oc-1', de: 'aberta', para: 'em_atendimento' },
    tipo: 'ocorrencia:mudou-status',
    ...mudar,
  };
}

/** Sobe `tratador` em 127.0.0.1, porta 0; fecha no fim do teste. */
async function servir(t, tratador) {
  const servidor = http.createServer(tratador);
  await new Promise((r) => servidor.listen(0, '127.0.0.1', r));
  t.after(() => {
    servidor.closeAllConnections();
    return new Promise((r) => servidor.close(r));
  });
  return servidor.address().port;
}

/**
 * Manda um pedido de verdade. `corpo` é string ou Buffer; `cabecalhos` pode
 * ter arrays (cabeçalho repetido).
 * @returns {Promise<{status: number, corpo: string}>}
 */
function pedir(porta, { metodo = 'POST', caminho = '/geohub/eventos', cabecalhos = {}, corpo } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port: porta, method: metodo, path: caminho, headers: cabecalhos, agent: false },
      (res) => {
        const partes = [];
        res.on('data', (p) => partes.push(p));
        res.on('end', () => resolve({ status: res.statusCode, corpo: Buffer.concat(partes).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(corpo);
  });
}

/**
 * Os cabeçalhos do Geohub para `corpo`, assinado com `segredo` em `ts`.
 * `anterior`, se dado, assina X-Geohub-Assinatura-Anterior. `agregado` ou
 * `sequencia` null omite o cabeçalho.
 */
function cabecalhosDoGeohub(corpo, { segredo, ts, anterior, agregado = 'ocorrencia:oc-1', sequencia, eventoId } = {}) {
  const c = {
    'Content-Type': 'application/json',
    'User-Agent': 'Geohub/teste',
    'X-Geohub-Timestamp': String(ts),
    'X-Geohub-Assinatura': assinar(segredo, ts, corpo),
    'X-Geohub-Entrega-Id': randomUUID(),
    'X-Geohub-Tentativa': '1',
  };
  if (eventoId !== undefined) c['X-Geohub-Evento-Id'] = eventoId;
  if (anterior !== undefined) c['X-Geohub-Assinatura-Anterior'] = assinar(anterior, ts, corpo);
  if (agregado !== null) c['X-Geohub-Agregado'] = agregado;
  if (sequencia !== null && sequencia !== undefined) c['X-Geohub-Sequencia'] = String(sequencia);
  return c;
}

module.exports = { umEnvelope, servir, pedir, cabecalhosDoGeohub };
