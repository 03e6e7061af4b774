'use strict';
/*
 * Harness dos receptores JavaScript para o teste de ponta a ponta em Go.
 *
 *   node receiver/js/testdata/servir.js --implementacao seed000|referencia
 *
 * Escuta em 127.0.0.1, porta escolhida pelo sistema, e escreve no stdout
 * exatamente uma linha, {"porta":N}, quando está escutando. Sai com SIGTERM
 * (ou SIGINT) ou quando o stdin fecha: quem o inicia deve lhe dar um pipe
 * no stdin (em Go, cmd.StdinPipe), porque um stdin /dev/null fecha na hora.
 *
 * Rotas:
 *
 *   POST /geohub/eventos  o receptor escolhido. seed000 é o código do guia
 *                         (testdata/seed000.js): o status que o receber dele
 *                         devolve, sem corpo (se a Promise rejeitar, 500).
 *                         referencia é ../receptor.js. Antes do primeiro
 *                         /configurar, 503.
 *   POST /configurar      {"segredo": "...", "integradorId": "..."}: troca o
 *                         segredo e o id do cadastro (campos ausentes ficam
 *                         como estavam). Na referência o segredo passa a ser
 *                         o ÚNICO que ela tem (para modelar "tem só o antigo
 *                         e depois troca para o novo"); ela aceita também
 *                         {"segredos": ["novo", "antigo"]}. Responde 204, ou
 *                         400 com corpo inválido.
 *   GET  /estado          {"aplicados": [{"id", "tipo", "agregado",
 *                         "sequencia"}...], "espera": <total adiantados>,
 *                         "descartes": [{"eventoId", "motivo"}...],
 *                         "status": {"<status http>": quantos},
 *                         "despachos": {"<id>": {despachoId, ocorrenciaId,
 *                         recurso, status}}, "ocorrencias": {"<id>": status}}
 *                         aplicados em ordem de aplicação; sequencia é o
 *                         cabeçalho X-Geohub-Sequencia como número (null se
 *                         ausente ou ilegível); status conta as respostas de
 *                         /geohub/eventos.
 */

const http = require('node:http');
const path = require('node:path');

const { Receptor } = require(path.join(__dirname, '..', 'receptor.js'));
const { ReceptorDoGuia, CABECALHO } = require(path.join(__dirname, 'seed000.js'));

function argumento(nome) {
  const i = process.argv.indexOf(nome);
  if (i >= 0) return process.argv[i + 1];
  const junto = process.argv.find((a) => a.startsWith(`${nome}=`));
  return junto?.slice(nome.length + 1);
}

function sequenciaDoCabecalho(valor) {
  if (typeof valor !== 'string' || !/^[1-9][0-9]*$/u.test(valor.trim())) return null;
  const n = Number(valor.trim());
  return Number.isSafeInteger(n) ? n : null;
}

/** O receptor do guia, e os cabeçalhos de cada envelope para o /estado. */
function implementacaoSeed000() {
  const guia = new ReceptorDoGuia({ segredo: undefined, integradorId: undefined });
  // O aplicados do guia guarda só envelopes: o agregado e a sequência de
  // cada um vêm dos cabeçalhos do pedido, guardados pelo id do evento.
  const cabecalhosPorId = new Map();
  return {
    configurar({ segredo, integradorId }) {
      if (segredo !== undefined) guia.opcoes.segredo = segredo;
      if (integradorId !== undefined) guia.opcoes.integradorId = integradorId;
    },
    configurado: () => typeof guia.opcoes.segredo === 'string',
    async receber(req) {
      const id = req.headers[CABECALHO.EVENTO_ID];
      if (id !== undefined) {
        cabecalhosPorId.set(id, {
          agregado: req.headers[CABECALHO.AGREGADO],
          sequencia: sequenciaDoCabecalho(req.headers[CABECALHO.SEQUENCIA]),
        });
      }
      try {
        return await guia.receber(req);
      } catch (erro) {
        process.stderr.write(`seed000: receber rejeitou: ${erro?.stack ?? erro}\n`);
        return 500;
      }
    },
    estado() {
      let espera = 0;
      for (const lista of guia.espera.values()) espera += lista.length;
      return {
        aplicados: guia.aplicados.map((e) => {
          const c = cabecalhosPorId.get(e.id);
          return { id: e.id, tipo: e.tipo, agregado: c?.agregado ?? e.id, sequencia: c?.sequencia ?? null };
        }),
        espera,
        descartes: guia.descartes.map(({ eventoId, motivo }) => ({ eventoId: eventoId ?? null, motivo })),
        despachos: Object.fromEntries(guia.despachos),
        ocorrencias: Object.fromEntries(guia.ocorrencias),
      };
    },
  };
}

/** O receptor de referência, com o histórico sem limite para o /estado. */
function implementacaoReferencia() {
  const aplicados = [];
  let configurado = false;
  const receptor = new Receptor({
    segredos: [],
    maxHistorico: Number.MAX_SAFE_INTEGER,
    aoAplicar: (envelope, entrega) => {
      aplicados.push({ id: envelope.id, tipo: envelope.tipo, agregado: entrega.agregado, sequencia: entrega.sequencia });
    },
  });
  return {
    configurar({ segredo, segredos, integradorId }) {
      if (segredos !== undefined) receptor.definirSegredos(segredos);
      else if (segredo !== undefined) receptor.definirSegredos([segredo]);
      if (segredo !== undefined || segredos !== undefined) configurado = true;
      if (integradorId !== undefined) receptor.definirIntegradorId(integradorId);
    },
    configurado: () => configurado,
    receber: (req) => receptor.receber(req),
    estado() {
      return {
        aplicados: aplicados.slice(),
        espera: receptor.totalEmEspera(),
        descartes: receptor.descartes().map(({ eventoId, motivo }) => ({ eventoId: eventoId ?? null, motivo })),
        despachos: Object.fromEntries(receptor.despachos().map((d) => [d.despachoId, d])),
        ocorrencias: Object.fromEntries(receptor.ocorrencias().map((o) => [o.ocorrenciaId, o.status])),
      };
    },
  };
}

function lerJson(req, limite = 64 * 1024) {
  return new Promise((resolve) => {
    const partes = [];
    let total = 0;
    req.on('data', (p) => {
      total += p.length;
      if (total <= limite) partes.push(p);
    });
    req.on('end', () => {
      if (total > limite) return resolve(undefined);
      try {
        resolve(JSON.parse(Buffer.concat(partes).toString('utf8')));
      } catch {
        resolve(undefined);
      }
    });
    req.on('error', () => resolve(undefined));
  });
}

function validaConfiguracao(c) {
  if (typeof c !== 'object' || c === null || Array.isArray(c)) return false;
  const { segredo, segredos, integradorId } = c;
  if (segredo === undefined && segredos === undefined && integradorId === undefined) return false;
  if (segredo !== undefined && (typeof segredo !== 'string' || segredo === '')) return false;
  if (segredos !== undefined && (!Array.isArray(segredos) || !segredos.every((s) => typeof s === 'string'))) {
    return false;
  }
  return integradorId === undefined || typeof integradorId === 'string';
}

function responder(res, status, corpo) {
  if (corpo === undefined) {
    // Um 413 pode chegar antes do fim do corpo: fecha a conexão depois.
    res.writeHead(status, status === 413 ? { Connection: 'close' } : {});
    res.end();
    return;
  }
  const texto = JSON.stringify(corpo);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(texto) });
  res.end(texto);
}

function main() {
  const nome = argumento('--implementacao');
  const fabricas = { seed000: implementacaoSeed000, referencia: implementacaoReferencia };
  if (!Object.hasOwn(fabricas, nome ?? '')) {
    process.stderr.write('uso: node servir.js --implementacao seed000|referencia\n');
    process.exit(2);
  }
  const impl = fabricas[nome]();
  const status = {};

  const servidor = http.createServer(async (req, res) => {
    const rota = (req.url ?? '').split('?')[0];
    if (rota === '/geohub/eventos') {
      if (req.method !== 'POST') {
        res.writeHead(405, { Allow: 'POST' });
        res.end();
        return;
      }
      let s;
      if (!impl.configurado()) {
        req.resume();
        s = 503;
      } else {
        try {
          s = await impl.receber(req);
        } catch {
          s = 500; // o corpo não chegou inteiro, ou um erro inesperado
        }
      }
      status[s] = (status[s] ?? 0) + 1;
      if (!res.headersSent) responder(res, s);
      return;
    }
    if (rota === '/configurar' && req.method === 'POST') {
      const c = await lerJson(req);
      if (!validaConfiguracao(c)) return responder(res, 400, { erro: 'esperado {"segredo": "...", "integradorId": "..."}' });
      impl.configurar(c);
      return responder(res, 204);
    }
    if (rota === '/estado' && req.method === 'GET') {
      return responder(res, 200, { ...impl.estado(), status: { ...status } });
    }
    req.resume();
    responder(res, 404, { erro: 'rota desconhecida' });
  });

  const sair = () => {
    servidor.close();
    process.exit(0);
  };
  process.on('SIGTERM', sair);
  process.on('SIGINT', sair);
  process.stdin.on('end', sair);
  process.stdin.on('close', sair);
  process.stdin.on('error', sair);
  process.stdin.resume();

  servidor.listen(0, '127.0.0.1', () => {
    process.stdout.write(`${JSON.stringify({ porta: servidor.address().port })}\n`);
  });
}

main();
