'use strict';
/**
 * Receptor de referência dos webhooks do Geohub, para Node.js 20, sem
 * dependências (só `node:`).
 *
 * É o receptor do guia do integrador ("5. O CAD recebe o que aconteceu")
 * com as cinco obrigações feitas do jeito certo, e com os dois defeitos do
 * código publicado no guia corrigidos:
 *
 * - a linha de base da sequência é 0: a primeira sequência que o Geohub
 *   manda para um (cadastro, agregado) é 1. O `?? sequencia - 1` do guia
 *   toma a primeira CHEGADA como linha de base, e um evento adiantado que
 *   chega antes do 1 passa na frente dele;
 * - quem espera guarda a SUA sequência (um Map sequência → envelope por
 *   agregado), e por isso dá para drenar em ordem quando o buraco fecha.
 *
 * E mais: aceita a assinatura de `X-Geohub-Assinatura` OU de
 * `X-Geohub-Assinatura-Anterior` com QUALQUER segredo configurado, de modo
 * que uma rotação nunca quebra a entrega; lê o corpo com limite; o eco
 * ainda consome a sua sequência (é pulado na vez dele, e os seguintes não
 * ficam presos atrás); um envelope repetido nunca é aplicado de novo.
 *
 * Uso:
 *
 *   const http = require('node:http');
 *   const { Receptor } = require('./receptor');
 *   const receptor = new Receptor({
 *     segredos: [process.env.SEGREDO_ATUAL, process.env.SEGREDO_ANTERIOR],
 *     integradorId: process.env.INTEGRADOR_ID,
 *     aoAplicar: (envelope, entrega) => { ... },
 *   });
 *   http.createServer(receptor.tratar).listen(9090);
 *
 * Sem URL pública, o mesmo receptor recebe pela sessão (`sessao.js`), que
 * lhe passa cada mensagem por `receberEntrega(cabecalhos, corpo)`.
 *
 * O código do integrador entra em `aoAplicar(envelope, entrega)`: chamado
 * uma vez por envelope, em ordem de sequência dentro do agregado, um de
 * cada vez por agregado. Pode devolver uma Promise. Se lançar (ou a Promise
 * rejeitar), a resposta é 500: o envelope não conta como visto e a
 * sequência não anda, então o Geohub reenvia.
 */

const { createHmac, timingSafeEqual } = require('node:crypto');

/** Os cabeçalhos que o Geohub manda (o Node os entrega em minúsculas). */
const CABECALHO = Object.freeze({
  AGREGADO: 'x-geohub-agregado',
  ASSINATURA: 'x-geohub-assinatura',
  ASSINATURA_ANTERIOR: 'x-geohub-assinatura-anterior',
  ENTREGA_ID: 'x-geohub-entrega-id',
  EVENTO_ID: 'x-geohub-evento-id',
  SEQUENCIA: 'x-geohub-sequencia',
  TENTATIVA: 'x-geohub-tentativa',
  TIMESTAMP: 'x-geohub-timestamp',
});

/** O plugin do DESFECHO do comando — a resposta, não o eco. */
const PLUGIN_DE_INTEGRACAO = 'integracao';

/** ±5 min, dos dois lados: relógio adiantado é tão comum quanto atrasado. */
const TOLERANCIA_EM_SEGUNDOS = 300;

/**
 * O limite do corpo: 1 MiB de payload (o limite do Geohub) mais folga para
 * o resto do envelope, como no SDK em Go. Acima disso, 413.
 */
const LIMITE_DO_CORPO = 1024 * 1024 + 64 * 1024;

/** Quantos ids de envelope o receptor lembra para deduplicar. */
const MAX_VISTOS = 100000;

/** Quantos adiantados o receptor segura por agregado; além disso, 503. */
const MAX_ESPERA_POR_AGREGADO = 1000;

/** Quantos aplicados e descartes recentes ficam para consulta. */
const MAX_HISTORICO = 1000;

/** Os motivos registrados em `descartes()`, os mesmos do guia e do SDK. */
const MOTIVO = Object.freeze({
  ASSINATURA_INVALIDA: 'assinatura-invalida',
  FORA_DA_JANELA: 'timestamp-fora-da-janela',
  CORPO_GRANDE: 'corpo-grande',
  ENVELOPE_INVALIDO: 'envelope-invalido',
  REPETIDO: 'repetido',
  ECO_PROPRIO: 'eco-proprio',
  ESPERA_CHEIA: 'espera-cheia',
  FALHA_AO_APLICAR: 'falha-ao-aplicar',
  SEM_SEGREDO: 'sem-segredo',
});

/**
 * O valor de `X-Geohub-Assinatura` para `corpo` enviado em `timestamp`:
 * `sha256=<hex do HMAC-SHA256(segredo, "<timestamp>.<corpo cru>")>`.
 * Serve para assinar pedidos nos testes do próprio integrador.
 *
 * @param {string|Buffer} segredo
 * @param {string|number} timestamp epoch em segundos, como vai no cabeçalho
 * @param {string|Buffer} corpo o corpo CRU (string é lida como UTF-8)
 */
function assinar(segredo, timestamp, corpo) {
  return `sha256=${hmac(paraBytes(segredo), String(timestamp), paraBytes(corpo)).toString('hex')}`;
}

function hmac(segredo, timestamp, corpo) {
  return createHmac('sha256', segredo).update(`${timestamp}.`, 'utf8').update(corpo).digest();
}

function paraBytes(x) {
  if (Buffer.isBuffer(x)) return x;
  if (x instanceof Uint8Array) return Buffer.from(x.buffer, x.byteOffset, x.byteLength);
  return Buffer.from(String(x), 'utf8');
}

/**
 * Diz se `x` tem a forma do envelope do guia: `id`, `tipo`, `ocorridoEm`,
 * `origem { plugin, versao, autoria { id, tipo } }` e `payload` objeto.
 * `origem.solicitacao` é opcional (só existe quando um comando causou o
 * evento).
 */
function ehEnvelope(x) {
  return (
    ehObjeto(x) &&
    ehTexto(x.id) &&
    ehTexto(x.tipo) &&
    ehTexto(x.ocorridoEm) &&
    !Number.isNaN(Date.parse(x.ocorridoEm)) &&
    ehObjeto(x.origem) &&
    ehTexto(x.origem.plugin) &&
    typeof x.origem.versao === 'string' &&
    ehObjeto(x.origem.autoria) &&
    ehTexto(x.origem.autoria.id) &&
    ehTexto(x.origem.autoria.tipo) &&
    ehObjeto(x.payload)
  );
}

function ehObjeto(x) {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function ehTexto(x) {
  return typeof x === 'string' && x !== '';
}

/**
 * Os cabeçalhos de um pedido: `headersDistinct` (nome → todos os valores,
 * também quando um cabeçalho vem repetido) onde o Node o tem, senão
 * `headers`, onde repetidos chegam juntados por vírgula.
 */
function cabecalhosDe(req) {
  return req.headersDistinct ?? req.headers ?? {};
}

/** Todos os valores de um cabeçalho (nome em minúsculas). */
function valoresDe(cabecalhos, nome) {
  const v = cabecalhos?.[nome];
  if (v === undefined || v === null) return [];
  return Array.isArray(v) ? v.map(String) : [String(v)];
}

/** O primeiro valor de um cabeçalho (como o `Header.Get` do Go). */
function valorDe(cabecalhos, nome) {
  const [primeiro] = valoresDe(cabecalhos, nome);
  return primeiro === undefined ? undefined : primeiro.trim();
}

/** A sequência do cabeçalho, ou `null` quando ausente ou ilegível. */
function sequenciaDe(texto) {
  if (texto === undefined || !/^[1-9][0-9]*$/u.test(texto)) return null;
  const n = Number(texto);
  return Number.isSafeInteger(n) ? n : null;
}

/**
 * Lê o corpo cru, até `limite` bytes. Acima disso devolve `null`, mas
 * continua lendo (e jogando fora) até 8 vezes o limite, para que a resposta
 * 413 chegue a quem ainda está enviando; além disso, corta a conexão.
 *
 * @returns {Promise<Buffer|null>}
 */
function corpoCruDe(req, limite) {
  return new Promise((resolver, rejeitar) => {
    const partes = [];
    let total = 0;
    req.on('data', (parte) => {
      total += parte.length;
      if (total <= limite) partes.push(parte);
      else if (total > 8 * limite) req.destroy();
    });
    req.on('end', () => resolver(total <= limite ? Buffer.concat(partes, total) : null));
    req.on('close', () => {
      if (!req.complete) {
        if (total > limite) resolver(null);
        else rejeitar(new Error('pedido interrompido antes do fim do corpo'));
      }
    });
    req.on('error', rejeitar);
  });
}

/**
 * O receptor. Veja o comentário do topo do arquivo.
 */
class Receptor {
  #segredos = [];
  #integradorId;
  #aoAplicar;
  #aoDescartar;
  #tolerancia;
  #limiteDoCorpo;
  #maxVistos;
  #maxEspera;
  #maxHistorico;
  #agora;

  /** Ids já aceitos, em ordem de chegada: o mais antigo sai primeiro. */
  #vistos = new Set();
  /** Ids sendo processados agora (só o mesmo id com cabeçalhos trocados). */
  #emVoo = new Set();
  /** A próxima sequência esperada por agregado; quem não está aqui espera 1. */
  #proxima = new Map();
  /** Os adiantados por agregado: Map sequência → { envelope, entrega, eco }. */
  #espera = new Map();
  /** A vez de cada agregado: um pedido por agregado de cada vez. */
  #filas = new Map();

  #aplicados = [];
  #descartes = [];
  #despachos = new Map();
  #ocorrencias = new Map();

  /**
   * @param {object} opcoes
   * @param {string[]} [opcoes.segredos] o segredo atual e, durante uma
   *   rotação, o anterior; uma assinatura que confere com qualquer um passa
   * @param {string} [opcoes.segredo] atalho para `segredos: [segredo]`
   * @param {string} [opcoes.integradorId] o id deste cadastro no Geohub:
   *   sem ele nenhum eco é descartado
   * @param {(envelope: object, entrega: object) => (void|Promise<void>)} [opcoes.aoAplicar]
   * @param {(descarte: {eventoId: string|undefined, motivo: string}) => void} [opcoes.aoDescartar]
   *   avisado de cada pedido respondido sem aplicar (um dos MOTIVO); o
   *   eventoId é o do envelope, ou o do cabeçalho X-Geohub-Evento-Id (não
   *   assinado) antes de o corpo ser confiável
   * @param {number} [opcoes.toleranciaEmSegundos] padrão 300
   * @param {number} [opcoes.limiteDoCorpo] em bytes; padrão LIMITE_DO_CORPO
   * @param {number} [opcoes.maxVistos] padrão 100000
   * @param {number} [opcoes.maxEsperaPorAgregado] padrão 1000
   * @param {number} [opcoes.maxHistorico] aplicados e descartes guardados
   *   para consulta; padrão 1000
   * @param {() => number} [opcoes.agora] o relógio, em ms; padrão Date.now
   */
  constructor(opcoes = {}) {
    this.definirSegredos(opcoes.segredos ?? [opcoes.segredo]);
    this.#integradorId = opcoes.integradorId;
    this.#aoAplicar = opcoes.aoAplicar;
    this.#aoDescartar = opcoes.aoDescartar;
    this.#tolerancia = opcoes.toleranciaEmSegundos ?? TOLERANCIA_EM_SEGUNDOS;
    this.#limiteDoCorpo = opcoes.limiteDoCorpo ?? LIMITE_DO_CORPO;
    this.#maxVistos = Math.max(1, opcoes.maxVistos ?? MAX_VISTOS);
    this.#maxEspera = Math.max(1, opcoes.maxEsperaPorAgregado ?? MAX_ESPERA_POR_AGREGADO);
    this.#maxHistorico = Math.max(0, opcoes.maxHistorico ?? MAX_HISTORICO);
    this.#agora = opcoes.agora ?? Date.now;
    // Para passar direto a http.createServer(receptor.tratar).
    this.tratar = this.tratar.bind(this);
  }

  /**
   * Troca os segredos (por exemplo, ao rotacionar). Vazios são ignorados.
   * @param {Array<string|Buffer|undefined>} segredos
   */
  definirSegredos(segredos) {
    this.#segredos = (segredos ?? [])
      .filter((s) => s !== undefined && s !== null && String(s) !== '')
      .map(paraBytes);
  }

  /** Troca o id deste cadastro (o que decide o eco). */
  definirIntegradorId(id) {
    this.#integradorId = id;
  }

  /**
   * O handler para `node:http`: só POST (405 com Allow, senão). Responde
   * 204 sem corpo para aceito, adiantado, repetido e eco.
   */
  async tratar(req, res) {
    if (req.method !== 'POST') {
      res.writeHead(405, { Allow: 'POST', 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('use POST\n');
      return;
    }
    let status;
    try {
      status = await this.receber(req);
    } catch {
      // O corpo não chegou inteiro (quem mandou já foi embora) ou um erro
      // inesperado: 500, que o Geohub tenta de novo; 400 seria definitivo.
      status = 500;
    }
    if (status === 204) {
      res.writeHead(204);
      res.end();
      return;
    }
    const cabecalhos = { 'Content-Type': 'text/plain; charset=utf-8' };
    if (status === 413) cabecalhos.Connection = 'close';
    res.writeHead(status, cabecalhos);
    res.end(`${status}\n`);
  }

  /**
   * Recebe um pedido e devolve o status da resposta do protocolo:
   *
   * - `401` — assinatura ou janela: o Geohub não insiste com quem recusa a
   *   credencial dele;
   * - `400` — corpo que não é envelope: insistir não conserta;
   * - `413` — corpo acima do limite;
   * - `204` — aceito: aplicado, adiantado (vai ser aplicado quando o buraco
   *   fechar), repetido ou eco. Responder erro ao repetido e ao eco faria o
   *   Geohub reenviar para sempre;
   * - `500` — `aoAplicar` falhou: o Geohub reenvia;
   * - `503` — volte depois: espera do agregado cheia, o mesmo id em voo, ou
   *   ainda sem segredo configurado (as entregas começam logo depois do
   *   cadastro: um `401` agora viraria dead letter).
   *
   * Rejeita se o corpo não chegar inteiro (a conexão caiu no meio).
   *
   * @param {import('node:http').IncomingMessage} req
   * @returns {Promise<number>}
   */
  async receber(req) {
    const corpo = await corpoCruDe(req, this.#limiteDoCorpo);
    const cabecalhos = cabecalhosDe(req);
    if (corpo === null) {
      this.#descartar(valorDe(cabecalhos, CABECALHO.EVENTO_ID), MOTIVO.CORPO_GRANDE);
      return 413;
    }
    return this.receberEntrega(cabecalhos, corpo);
  }

  /**
   * O miolo de `receber`, sem HTTP: uma entrega que chegou por outro
   * caminho, como uma mensagem da sessão (`sessao.js`). Devolve os mesmos
   * status de `receber`.
   *
   * @param {Record<string, string|string[]|undefined>} cabecalhos nome do
   *   cabeçalho em minúsculas → valor, como o `req.headers` do Node
   *   (`x-geohub-assinatura`, `x-geohub-agregado`...); um valor repetido
   *   pode vir como array
   * @param {Buffer|string} corpo o envelope byte a byte (string é lida como
   *   UTF-8): a assinatura confere sobre estes bytes
   * @returns {Promise<number>}
   */
  async receberEntrega(cabecalhos, corpo) {
    const eventoIdDoCabecalho = valorDe(cabecalhos, CABECALHO.EVENTO_ID);
    corpo = paraBytes(corpo);
    if (corpo.length > this.#limiteDoCorpo) {
      this.#descartar(eventoIdDoCabecalho, MOTIVO.CORPO_GRANDE);
      return 413;
    }

    if (this.#segredos.length === 0) {
      this.#descartar(eventoIdDoCabecalho, MOTIVO.SEM_SEGREDO);
      return 503;
    }
    // Obrigação 1: sobre o corpo CRU e antes de qualquer parse; conferir
    // depois provaria a assinatura de outra coisa.
    const motivo = this.#conferirAssinatura(cabecalhos, corpo);
    if (motivo !== undefined) {
      this.#descartar(eventoIdDoCabecalho, motivo);
      return 401;
    }

    // Obrigação 2.
    let envelope;
    try {
      envelope = JSON.parse(corpo.toString('utf8'));
    } catch {
      envelope = undefined;
    }
    if (!ehEnvelope(envelope)) {
      this.#descartar(eventoIdDoCabecalho, MOTIVO.ENVELOPE_INVALIDO);
      return 400;
    }

    const agregado = valorDe(cabecalhos, CABECALHO.AGREGADO) || undefined;
    const entrega = {
      agregado: agregado ?? envelope.id,
      sequencia: sequenciaDe(valorDe(cabecalhos, CABECALHO.SEQUENCIA)),
      entregaId: valorDe(cabecalhos, CABECALHO.ENTREGA_ID),
      tentativa: sequenciaDe(valorDe(cabecalhos, CABECALHO.TENTATIVA)),
    };
    // Obrigação 5, o caso sem ordem: sequência ilegível (cabeçalho ausente
    // ou adulterado) aplica na hora. O cabeçalho NÃO entra no HMAC, e travar
    // a projeção por causa de um metadado não provado seria entregar o
    // controle a quem está no caminho. Sem agregado, o agregado é o próprio
    // envelope: não há com o que ordená-lo, então também aplica na hora.
    if (agregado === undefined || entrega.sequencia === null) {
      return this.#semOrdem(envelope, entrega);
    }
    return this.#naVez(agregado, () => this.#emOrdem(envelope, entrega));
  }

  /**
   * Devolve `undefined` quando o timestamp está na janela e alguma
   * assinatura recebida confere com algum segredo; senão, o motivo.
   */
  #conferirAssinatura(cabecalhos, corpo) {
    const timestamp = valorDe(cabecalhos, CABECALHO.TIMESTAMP);
    // O texto assinado é o cabeçalho como veio: só a forma canônica passa,
    // para que "+1761912251" ou "01761912251" não se passem por outro.
    if (timestamp === undefined || !/^(0|-?[1-9][0-9]*)$/u.test(timestamp)) {
      return MOTIVO.FORA_DA_JANELA;
    }
    const segundos = Number(timestamp);
    if (!Number.isSafeInteger(segundos)) return MOTIVO.FORA_DA_JANELA;
    if (Math.abs(this.#agora() / 1000 - segundos) > this.#tolerancia) {
      return MOTIVO.FORA_DA_JANELA;
    }
    const recebidas = [];
    for (const nome of [CABECALHO.ASSINATURA, CABECALHO.ASSINATURA_ANTERIOR]) {
      for (const valor of valoresDe(cabecalhos, nome)) {
        for (const parte of valor.split(',')) {
          const hex = /^sha256=(?<hex>[0-9a-fA-F]{64})$/u.exec(parte.trim())?.groups?.hex;
          if (hex !== undefined) recebidas.push(Buffer.from(hex, 'hex'));
        }
      }
    }
    let confere = false;
    for (const segredo of this.#segredos) {
      const esperada = hmac(segredo, timestamp, corpo);
      for (const recebida of recebidas) {
        // timingSafeEqual lança com tamanhos diferentes: a guarda vem antes.
        if (recebida.length === esperada.length && timingSafeEqual(recebida, esperada)) {
          confere = true;
        }
      }
    }
    return confere ? undefined : MOTIVO.ASSINATURA_INVALIDA;
  }

  /**
   * Obrigação 4: é eco o fato de DOMÍNIO que este CAD causou. O desfecho
   * (`integracao:*`) também vem com a autoria dele — é assim que o Geohub
   * sabe a quem entregá-lo —, mas ele é a RESPOSTA ao comando, não o eco:
   * descartá-lo seria jogar fora o único retorno que o webhook traz.
   */
  #ehEco(envelope) {
    const { autoria, plugin } = envelope.origem;
    return (
      this.#integradorId !== undefined &&
      this.#integradorId !== '' &&
      autoria.tipo === 'integrador' &&
      autoria.id === this.#integradorId &&
      plugin !== PLUGIN_DE_INTEGRACAO &&
      !envelope.tipo.startsWith(`${PLUGIN_DE_INTEGRACAO}:`)
    );
  }

  /** Roda `tarefa` quando chegar a vez de `agregado` (um de cada vez). */
  async #naVez(agregado, tarefa) {
    const anterior = this.#filas.get(agregado);
    let liberar;
    const minha = new Promise((r) => {
      liberar = r;
    });
    const cauda = anterior === undefined ? minha : anterior.then(() => minha);
    this.#filas.set(agregado, cauda);
    if (anterior !== undefined) await anterior;
    try {
      return await tarefa();
    } finally {
      liberar();
      if (this.#filas.get(agregado) === cauda) this.#filas.delete(agregado);
    }
  }

  /** O mesmo id em voo sob outro agregado (cabeçalhos trocados): 503. */
  #reservar(id) {
    if (this.#emVoo.has(id)) return false;
    this.#emVoo.add(id);
    return true;
  }

  async #semOrdem(envelope, entrega) {
    if (!this.#reservar(envelope.id)) return 503;
    try {
      // Obrigação 3.
      if (this.#vistos.has(envelope.id)) {
        this.#descartar(envelope.id, MOTIVO.REPETIDO);
        return 204;
      }
      if (this.#ehEco(envelope)) {
        this.#marcarVisto(envelope.id);
        this.#descartar(envelope.id, MOTIVO.ECO_PROPRIO);
        return 204;
      }
      try {
        await this.#aplicar(envelope, entrega);
      } catch {
        this.#descartar(envelope.id, MOTIVO.FALHA_AO_APLICAR);
        return 500;
      }
      this.#marcarVisto(envelope.id);
      return 204;
    } finally {
      this.#emVoo.delete(envelope.id);
    }
  }

  /**
   * Obrigação 5: aplica em ordem de sequência dentro do agregado, a partir
   * de 1 (linha de base 0). O que chega adiantado espera, com a sua
   * sequência, até o buraco fechar. Chama-se na vez do agregado.
   */
  async #emOrdem(envelope, entrega) {
    const { agregado, sequencia } = entrega;
    if (!this.#reservar(envelope.id)) return 503;
    try {
      const proxima = this.#proxima.get(agregado) ?? 1;
      const esperando = this.#espera.get(agregado);
      // Repetido pelo id, ou por uma sequência já aplicada (o reenvio de um
      // dead letter tem a mesma sequência, mesmo que o id já tenha saído de
      // #vistos), ou por uma já guardada na espera.
      if (this.#vistos.has(envelope.id) || sequencia < proxima || esperando?.has(sequencia)) {
        this.#descartar(envelope.id, MOTIVO.REPETIDO);
        return 204;
      }
      const eco = this.#ehEco(envelope);
      if (sequencia > proxima) {
        if ((esperando?.size ?? 0) >= this.#maxEspera) {
          this.#descartar(envelope.id, MOTIVO.ESPERA_CHEIA);
          return 503;
        }
        const espera = esperando ?? new Map();
        espera.set(sequencia, { envelope, entrega, eco });
        this.#espera.set(agregado, espera);
        this.#marcarVisto(envelope.id);
        return 204;
      }
      try {
        await this.#passo(envelope, entrega, eco);
      } catch {
        this.#descartar(envelope.id, MOTIVO.FALHA_AO_APLICAR);
        return 500;
      }
      return 204;
    } finally {
      this.#emVoo.delete(envelope.id);
      // Seja o que for este pedido, um adiantado que ficou na frente da
      // espera porque aoAplicar falhou na vez dele ganha outra tentativa.
      await this.#drenar(agregado).catch(() => {});
    }
  }

  /**
   * Aplica (ou pula, se for eco: o eco ainda ocupa a sua sequência) o
   * próximo do agregado, marca como visto e avança a sequência.
   */
  async #passo(envelope, entrega, eco) {
    if (eco) this.#descartar(envelope.id, MOTIVO.ECO_PROPRIO);
    else await this.#aplicar(envelope, entrega);
    this.#marcarVisto(envelope.id);
    this.#proxima.set(entrega.agregado, entrega.sequencia + 1);
  }

  /**
   * Aplica os adiantados consecutivos do agregado, em ordem, parando no
   * próximo buraco ou na primeira falha de aoAplicar (que fica na frente).
   */
  async #drenar(agregado) {
    const espera = this.#espera.get(agregado);
    while (espera !== undefined && espera.size > 0) {
      const proxima = this.#proxima.get(agregado) ?? 1;
      for (const sequencia of espera.keys()) {
        if (sequencia < proxima) espera.delete(sequencia); // já aplicada por outro caminho
      }
      const vez = espera.get(proxima);
      if (vez === undefined) break;
      await this.#passo(vez.envelope, vez.entrega, vez.eco);
      espera.delete(proxima);
    }
    if (espera !== undefined && espera.size === 0) this.#espera.delete(agregado);
  }

  /**
   * Tenta de novo os adiantados cuja vez chegou mas cujo aoAplicar falhou.
   * Um CAD pode chamar num timer; o próximo pedido do agregado também tenta.
   */
  async drenarTudo() {
    const falhas = [];
    for (const agregado of [...this.#espera.keys()]) {
      try {
        await this.#naVez(agregado, () => this.#drenar(agregado));
      } catch (erro) {
        falhas.push(erro);
      }
    }
    if (falhas.length > 0) throw new AggregateError(falhas, 'aoAplicar falhou na drenagem');
  }

  /**
   * Obrigação 6 do guia, o estado por DESPACHO (a projeção), e depois o
   * código do integrador. Como cada agregado chega em ordem e uma vez só,
   * a projeção pode simplesmente sobrescrever; e, se aoAplicar falhar, a
   * reaplicação do mesmo envelope dá o mesmo estado.
   */
  async #aplicar(envelope, entrega) {
    this.#projetar(envelope);
    if (this.#aoAplicar !== undefined) await this.#aoAplicar(envelope, entrega);
    this.#guardar(this.#aplicados, {
      id: envelope.id,
      tipo: envelope.tipo,
      agregado: entrega.agregado,
      sequencia: entrega.sequencia,
      envelope,
    });
  }

  /**
   * A projeção: o que o CAD mostra na tela.
   *
   * - `ocorrencia:despachada` — nasceu um despacho. É aqui que o
   *   `despachoId` aparece pela primeira vez;
   * - `ocorrencia:despacho-mudou-status` — a chegada ao local é esta, com
   *   `para: 'no_local'`. Não existe um `viatura-chegou`;
   * - `ocorrencia:mudou-status` — a OCORRÊNCIA mudou. `em_atendimento` é
   *   consequência da PRIMEIRA chegada, e não diz nada sobre os outros
   *   despachos;
   * - `ocorrencia:registrada` — a ocorrência nasce (`aberta`).
   */
  #projetar(envelope) {
    const payload = envelope.payload;
    if (envelope.tipo === 'ocorrencia:despachada') {
      const despacho = payload.despacho;
      if (!ehObjeto(despacho) || !ehTexto(despacho.id)) return;
      const recurso = despacho.recurso?.identificador;
      this.#despachos.set(despacho.id, {
        despachoId: despacho.id,
        ocorrenciaId: despacho.ocorrenciaId,
        ...(typeof recurso === 'string' ? { recurso } : {}),
        status: despacho.status,
      });
      return;
    }
    if (envelope.tipo === 'ocorrencia:despacho-mudou-status') {
      if (!ehTexto(payload.id)) return;
      const anterior = this.#despachos.get(payload.id);
      this.#despachos.set(payload.id, {
        despachoId: payload.id,
        ocorrenciaId: payload.ocorrenciaId ?? anterior?.ocorrenciaId,
        ...(anterior?.recurso === undefined ? {} : { recurso: anterior.recurso }),
        status: payload.para,
      });
      return;
    }
    if (envelope.tipo === 'ocorrencia:mudou-status') {
      if (ehTexto(payload.id)) this.#ocorrencias.set(payload.id, payload.para);
      return;
    }
    if (envelope.tipo === 'ocorrencia:registrada') {
      if (ehTexto(payload.id) && !this.#ocorrencias.has(payload.id)) {
        this.#ocorrencias.set(payload.id, payload.status);
      }
    }
  }

  #marcarVisto(id) {
    if (this.#vistos.has(id)) return;
    if (this.#vistos.size >= this.#maxVistos) {
      this.#vistos.delete(this.#vistos.values().next().value);
    }
    this.#vistos.add(id);
  }

  #descartar(eventoId, motivo) {
    this.#guardar(this.#descartes, { eventoId, motivo });
    if (this.#aoDescartar === undefined) return;
    try {
      this.#aoDescartar({ eventoId, motivo });
    } catch {
      // Um aviso que falha não muda a resposta do protocolo.
    }
  }

  #guardar(lista, item) {
    if (this.#maxHistorico === 0) return;
    if (lista.length >= this.#maxHistorico) lista.shift();
    lista.push(item);
  }

  /**
   * Os últimos aplicados (até `maxHistorico`), em ordem de aplicação:
   * `{ id, tipo, agregado, sequencia, envelope }`. `sequencia` é `null`
   * quando o cabeçalho faltou ou era ilegível.
   */
  aplicados() {
    return this.#aplicados.slice();
  }

  /** Os últimos descartes (até `maxHistorico`): `{ eventoId, motivo }`. */
  descartes() {
    return this.#descartes.slice();
  }

  /** Quantos adiantados esperam no agregado. */
  emEspera(agregado) {
    return this.#espera.get(agregado)?.size ?? 0;
  }

  /** Quantos adiantados esperam, somando todos os agregados. */
  totalEmEspera() {
    let total = 0;
    for (const espera of this.#espera.values()) total += espera.size;
    return total;
  }

  /**
   * O estado de UM despacho: `{ despachoId, ocorrenciaId, recurso, status }`.
   *
   * Nunca o estado "da ocorrência no local": `no_local` é propriedade do
   * despacho de uma viatura, e a ocorrência pode ter outra ainda em
   * deslocamento.
   */
  despacho(id) {
    const d = this.#despachos.get(id);
    return d === undefined ? undefined : { ...d };
  }

  /** Todos os despachos conhecidos. */
  despachos() {
    return [...this.#despachos.values()].map((d) => ({ ...d }));
  }

  /** O status da ocorrência (`aberta`, `em_atendimento`, `encerrada`). */
  ocorrencia(id) {
    return this.#ocorrencias.get(id);
  }

  /** Todas as ocorrências conhecidas: `{ ocorrenciaId, status }`. */
  ocorrencias() {
    return [...this.#ocorrencias].map(([ocorrenciaId, status]) => ({ ocorrenciaId, status }));
  }
}

module.exports = {
  Receptor,
  assinar,
  ehEnvelope,
  CABECALHO,
  PLUGIN_DE_INTEGRACAO,
  TOLERANCIA_EM_SEGUNDOS,
  LIMITE_DO_CORPO,
  MAX_VISTOS,
  MAX_ESPERA_POR_AGREGADO,
  MOTIVO,
};
