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
 * ficam presos atrás); as entregas de teste e de verificação
 * (`integracao:teste`, `integracao:verificacao`, guia 12.6) são aceitas e
 * descartadas do mesmo jeito; um envelope repetido nunca é aplicado de novo.
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
 *
 * Estado durável (guia, seções 7 e 16.1): por padrão os ids vistos, a
 * próxima sequência de cada agregado e os adiantados retidos ficam em
 * memória, e um CAD reiniciado esperaria para sempre, em cada agregado que
 * já conhecia, pelas sequências que já aplicou. Para sobreviver a um
 * reinício, passe `sequencias` (e, de preferência, `vistos` e `retidos`),
 * ganchos sobre o banco do CAD que podem devolver Promise; o melhor é gravar
 * a próxima sequência (`entrega.sequencia + 1`) na MESMA transação da
 * projeção, dentro de `aoAplicar`, e `sequencias.proxima` lê-la de volta.
 * Um gancho que lança (ou rejeita) faz a entrega ser respondida 503
 * (`estado-indisponivel`), nunca 204: o Geohub tenta de novo.
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

/**
 * Quantos agregados sem nada retido ficam com a próxima sequência em
 * memória quando ela também está em `sequencias` (o gancho durável); além
 * disso, o mais antigo é esquecido e, na próxima entrega dele, lido de novo.
 * Sem o gancho, a memória é o único lugar dela e nada é esquecido.
 */
const MAX_AGREGADOS_EM_MEMORIA = 100000;

/**
 * Os tipos das entregas que não trazem fato nenhum (guia 12.6): a
 * verificação do administrador e o teste (o testador, o evento de teste).
 * Reconhecidos pelo tipo, por igualdade exata, só depois da assinatura e do
 * envelope; respondidos 204 sem aplicar, ocupando a sua sequência.
 */
const TIPO_VERIFICACAO = 'integracao:verificacao';
const TIPO_TESTE = 'integracao:teste';
const TIPOS_DE_TESTE = Object.freeze([TIPO_VERIFICACAO, TIPO_TESTE]);
const EH_TESTE = new Set(TIPOS_DE_TESTE);

/** Os motivos registrados em `descartes()`, os mesmos do guia e do SDK. */
const MOTIVO = Object.freeze({
  ASSINATURA_INVALIDA: 'assinatura-invalida',
  FORA_DA_JANELA: 'timestamp-fora-da-janela',
  CORPO_GRANDE: 'corpo-grande',
  ENVELOPE_INVALIDO: 'envelope-invalido',
  REPETIDO: 'repetido',
  ECO_PROPRIO: 'eco-proprio',
  /** `integracao:teste` ou `integracao:verificacao`: 204, sem aplicar. */
  TESTE: 'teste',
  ESPERA_CHEIA: 'espera-cheia',
  FALHA_AO_APLICAR: 'falha-ao-aplicar',
  /** Um gancho de estado (`vistos`, `sequencias`, `retidos`) falhou: 503. */
  ESTADO_INDISPONIVEL: 'estado-indisponivel',
  SEM_SEGREDO: 'sem-segredo',
});

/** A falha de um gancho de estado, para responder 503 e não 500. */
class ErroDeEstado extends Error {
  constructor(causa) {
    super(`estado do receptor indisponível: ${causa?.message ?? causa}`, { cause: causa });
    this.name = 'ErroDeEstado';
  }
}

/**
 * Os ids vistos em memória, o padrão de `vistos`: os últimos `max`, o mais
 * antigo sai primeiro.
 */
class VistosEmMemoria {
  #ids = new Set();
  #max;

  constructor(max) {
    this.#max = max;
  }

  tem(id) {
    return this.#ids.has(id);
  }

  marcar(id) {
    if (this.#ids.has(id)) return;
    if (this.#ids.size >= this.#max) this.#ids.delete(this.#ids.values().next().value);
    this.#ids.add(id);
  }
}

/** Um gancho de estado: objeto com as funções pedidas, ou ausente. */
function gancho(nome, valor, funcoes) {
  if (valor === undefined || valor === null) return undefined;
  for (const f of funcoes) {
    if (typeof valor[f] !== 'function') {
      throw new TypeError(`opcoes.${nome} precisa de ${funcoes.map((x) => `${x}()`).join(', ')}: falta ${f}()`);
    }
  }
  return valor;
}

/**
 * A próxima sequência que `sequencias.proxima` devolveu: `undefined` ou
 * `null` (agregado desconhecido) é 1; aceita número, bigint ou texto com um
 * inteiro (o BIGINT do node-postgres chega como texto).
 */
function proximaLida(agregado, lida) {
  if (lida === undefined || lida === null) return 1;
  let n = lida;
  if (typeof lida === 'bigint') n = Number(lida);
  else if (typeof lida === 'string' && /^[1-9][0-9]*$/u.test(lida.trim())) n = Number(lida.trim());
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new TypeError(`sequencias.proxima(${JSON.stringify(agregado)}) devolveu ${String(lida)}: esperado um inteiro ≥ 1`);
  }
  return n;
}

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
  #maxEspera;
  #maxHistorico;
  #maxAgregados;
  #agora;

  /** Os ids aplicados ou pulados: o gancho `vistos`, ou a memória. */
  #vistos;
  /** O gancho `sequencias`, se houver. */
  #sequencias;
  /** O gancho `retidos`, se houver. */
  #retidos;

  /** Os ids retidos agora (adiantados): um repetido deles é repetido. */
  #idsRetidos = new Set();
  /** Ids sendo processados agora (só o mesmo id com cabeçalhos trocados). */
  #emVoo = new Set();
  /**
   * A próxima sequência esperada por agregado, em ordem de uso (o mais
   * antigo primeiro). Sem `sequencias`, é o único lugar dela e quem não está
   * aqui espera 1; com `sequencias`, é o que já foi lido ou gravado lá.
   */
  #proxima = new Map();
  /** Os agregados cujos retidos já vieram de `retidos.carregar`. */
  #retidosCarregados = new Set();
  /** Os adiantados por agregado: Map sequência → { envelope, entrega, pular }. */
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
   *   `entrega` é `{ agregado, sequencia, entregaId, tentativa }`;
   *   `sequencia` é `null` quando o cabeçalho faltou ou era ilegível
   * @param {(descarte: {eventoId: string|undefined, motivo: string}) => void} [opcoes.aoDescartar]
   *   avisado de cada pedido respondido sem aplicar (um dos MOTIVO); o
   *   eventoId é o do envelope, ou o do cabeçalho X-Geohub-Evento-Id (não
   *   assinado) antes de o corpo ser confiável
   * @param {{proxima: (agregado: string) => (number|string|bigint|null|undefined|Promise<number|string|bigint|null|undefined>),
   *   definirProxima: (agregado: string, proxima: number) => (void|Promise<void>)}} [opcoes.sequencias]
   *   a próxima sequência esperada de cada agregado, durável: `proxima` é
   *   consultado na primeira vez que o agregado aparece no processo (na vez
   *   dele: a ordem vale), e devolve 1 (ou `undefined`) para um agregado
   *   desconhecido; `definirProxima` é avisado depois de cada entrega
   *   aplicada ou pulada (eco, teste), com a sequência dela mais 1. Nunca
   *   diminui. Padrão: só em memória
   * @param {{tem: (id: string) => (boolean|Promise<boolean>), marcar: (id: string) => (void|Promise<void>)}} [opcoes.vistos]
   *   os ids de envelope aplicados ou pulados, duráveis: `tem` é consultado
   *   a cada entrega, `marcar` depois de aplicar ou pular (nunca ao reter).
   *   Padrão: os últimos `maxVistos`, em memória
   * @param {{carregar: (agregado: string) => (Iterable<{envelope: object, entrega: object}>|Promise<Iterable<{envelope: object, entrega: object}>>),
   *   guardar: (agregado: string, sequencia: number, retido: {envelope: object, entrega: object}) => (void|Promise<void>),
   *   remover: (agregado: string, sequencia: number) => (void|Promise<void>)}} [opcoes.retidos]
   *   os adiantados, duráveis (um retido foi respondido 204 e o Geohub não o
   *   manda de novo): `guardar` antes de responder 204 a um adiantado,
   *   `remover` depois de aplicá-lo, `carregar` junto com `proxima`.
   *   Padrão: só em memória
   * @param {number} [opcoes.toleranciaEmSegundos] padrão 300
   * @param {number} [opcoes.limiteDoCorpo] em bytes; padrão LIMITE_DO_CORPO
   * @param {number} [opcoes.maxVistos] padrão 100000 (só sem `vistos`)
   * @param {number} [opcoes.maxEsperaPorAgregado] padrão 1000
   * @param {number} [opcoes.maxAgregadosEmMemoria] padrão 100000 (só com
   *   `sequencias`)
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
    this.#maxEspera = Math.max(1, opcoes.maxEsperaPorAgregado ?? MAX_ESPERA_POR_AGREGADO);
    this.#maxHistorico = Math.max(0, opcoes.maxHistorico ?? MAX_HISTORICO);
    this.#maxAgregados = Math.max(1, opcoes.maxAgregadosEmMemoria ?? MAX_AGREGADOS_EM_MEMORIA);
    this.#agora = opcoes.agora ?? Date.now;
    this.#vistos = gancho('vistos', opcoes.vistos, ['tem', 'marcar'])
      ?? new VistosEmMemoria(Math.max(1, opcoes.maxVistos ?? MAX_VISTOS));
    this.#sequencias = gancho('sequencias', opcoes.sequencias, ['proxima', 'definirProxima']);
    this.#retidos = gancho('retidos', opcoes.retidos, ['carregar', 'guardar', 'remover']);
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
   * 204 sem corpo para aceito, adiantado, repetido, eco e teste.
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
   *   fechar), repetido, eco ou teste. Responder erro ao repetido, ao eco e
   *   ao teste faria o Geohub reenviar até a dead letter;
   * - `500` — `aoAplicar` falhou: o Geohub reenvia;
   * - `503` — volte depois: espera do agregado cheia, o mesmo id em voo, um
   *   gancho de estado (`vistos`, `sequencias`, `retidos`) que falhou, ou
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

  /**
   * Por que um envelope (assinado e conferido) é respondido 204 sem ser
   * aplicado: a verificação e o teste (guia 12.6, pelo tipo exato: um
   * `integracao:*` só o Geohub publica) ou o eco; `undefined` quando se
   * aplica. Os dois ainda ocupam a sua sequência.
   */
  #motivoParaPular(envelope) {
    if (EH_TESTE.has(envelope.tipo)) return MOTIVO.TESTE;
    if (this.#ehEco(envelope)) return MOTIVO.ECO_PROPRIO;
    return undefined;
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

  /** Se o id já foi aplicado, pulado ou está retido. Lança ErroDeEstado. */
  async #jaVisto(id) {
    if (this.#idsRetidos.has(id)) return true;
    try {
      return Boolean(await this.#vistos.tem(id));
    } catch (erro) {
      throw new ErroDeEstado(erro);
    }
  }

  async #marcarVisto(id) {
    try {
      await this.#vistos.marcar(id);
    } catch (erro) {
      throw new ErroDeEstado(erro);
    }
  }

  /** O status de uma falha no caminho de uma entrega: 503 ou 500. */
  #falhou(id, erro) {
    if (erro instanceof ErroDeEstado) {
      this.#descartar(id, MOTIVO.ESTADO_INDISPONIVEL);
      return 503;
    }
    this.#descartar(id, MOTIVO.FALHA_AO_APLICAR);
    return 500;
  }

  async #semOrdem(envelope, entrega) {
    if (!this.#reservar(envelope.id)) return 503;
    try {
      // Obrigação 3.
      if (await this.#jaVisto(envelope.id)) {
        this.#descartar(envelope.id, MOTIVO.REPETIDO);
        return 204;
      }
      const pular = this.#motivoParaPular(envelope);
      if (pular === undefined) await this.#aplicar(envelope, entrega);
      await this.#marcarVisto(envelope.id);
      if (pular !== undefined) this.#descartar(envelope.id, pular);
      return 204;
    } catch (erro) {
      return this.#falhou(envelope.id, erro);
    } finally {
      this.#emVoo.delete(envelope.id);
    }
  }

  /**
   * Obrigação 5: aplica em ordem de sequência dentro do agregado, a partir
   * de 1 (linha de base 0), ou da próxima que `sequencias` guardou. O que
   * chega adiantado espera, com a sua sequência, até o buraco fechar.
   * Chama-se na vez do agregado.
   */
  async #emOrdem(envelope, entrega) {
    const { agregado, sequencia } = entrega;
    if (!this.#reservar(envelope.id)) return 503;
    try {
      const proxima = await this.#estadoDe(agregado);
      const esperando = this.#espera.get(agregado);
      // Repetido pelo id, ou por uma sequência já aplicada (o reenvio de um
      // dead letter tem a mesma sequência, mesmo que o id já tenha saído de
      // vistos), ou por uma já guardada na espera.
      if ((await this.#jaVisto(envelope.id)) || sequencia < proxima || esperando?.has(sequencia)) {
        this.#descartar(envelope.id, MOTIVO.REPETIDO);
        return 204;
      }
      const pular = this.#motivoParaPular(envelope);
      if (sequencia > proxima) {
        if ((esperando?.size ?? 0) >= this.#maxEspera) {
          this.#descartar(envelope.id, MOTIVO.ESPERA_CHEIA);
          return 503;
        }
        // Durável ANTES do 204: depois dele o Geohub não o manda de novo.
        if (this.#retidos !== undefined) {
          try {
            await this.#retidos.guardar(agregado, sequencia, { envelope, entrega });
          } catch (erro) {
            throw new ErroDeEstado(erro);
          }
        }
        const espera = esperando ?? new Map();
        espera.set(sequencia, { envelope, entrega, pular });
        this.#espera.set(agregado, espera);
        this.#idsRetidos.add(envelope.id);
        return 204;
      }
      await this.#passo(envelope, entrega, pular);
      return 204;
    } catch (erro) {
      return this.#falhou(envelope.id, erro);
    } finally {
      this.#emVoo.delete(envelope.id);
      // Seja o que for este pedido, um adiantado que ficou na frente da
      // espera porque aoAplicar falhou na vez dele ganha outra tentativa.
      await this.#drenar(agregado).catch(() => {});
    }
  }

  /**
   * A próxima sequência de `agregado`, da memória ou, na primeira vez que
   * ele aparece (ou depois de esquecido), de `sequencias.proxima`; e os
   * retidos dele, de `retidos.carregar`, uma vez. Chama-se na vez do
   * agregado. Lança ErroDeEstado.
   */
  async #estadoDe(agregado) {
    let proxima = this.#proxima.get(agregado);
    try {
      if (proxima === undefined && this.#sequencias !== undefined) {
        proxima = proximaLida(agregado, await this.#sequencias.proxima(agregado));
        this.#lembrar(agregado, proxima);
      }
      proxima ??= 1;
      if (this.#retidos !== undefined && !this.#retidosCarregados.has(agregado)) {
        await this.#carregarRetidos(agregado, proxima);
      }
    } catch (erro) {
      throw erro instanceof ErroDeEstado ? erro : new ErroDeEstado(erro);
    }
    return proxima;
  }

  async #carregarRetidos(agregado, proxima) {
    const lidos = [];
    for (const retido of (await this.#retidos.carregar(agregado)) ?? []) {
      const { envelope, entrega } = retido ?? {};
      const sequencia = entrega?.sequencia;
      if (!ehEnvelope(envelope) || !Number.isSafeInteger(sequencia) || sequencia < 1) {
        throw new TypeError(`retidos.carregar(${JSON.stringify(agregado)}): cada retido é { envelope, entrega } como foi guardado`);
      }
      lidos.push({ envelope, entrega: { ...entrega, agregado } });
    }
    const espera = this.#espera.get(agregado) ?? new Map();
    for (const { envelope, entrega } of lidos) {
      if (entrega.sequencia < proxima) {
        // Aplicado antes de o remover chegar ao banco: fica para trás.
        await this.#removerRetido(agregado, entrega.sequencia);
        continue;
      }
      espera.set(entrega.sequencia, { envelope, entrega, pular: this.#motivoParaPular(envelope) });
      this.#idsRetidos.add(envelope.id);
    }
    if (espera.size > 0) this.#espera.set(agregado, espera);
    this.#retidosCarregados.add(agregado);
  }

  /** Um `remover` que falha não muda a resposta: a próxima carga limpa. */
  async #removerRetido(agregado, sequencia) {
    if (this.#retidos === undefined) return;
    try {
      await this.#retidos.remover(agregado, sequencia);
    } catch {
      // Um retido abaixo da próxima sequência é jogado fora ao carregar.
    }
  }

  /**
   * Guarda a próxima sequência em memória como a mais recente. Com
   * `sequencias`, esquece o agregado mais antigo quando passa de
   * `maxAgregadosEmMemoria` (sem retidos e fora da vez: relê-lo é barato).
   */
  #lembrar(agregado, proxima) {
    this.#proxima.delete(agregado);
    this.#proxima.set(agregado, proxima);
    if (this.#sequencias === undefined || this.#proxima.size <= this.#maxAgregados) return;
    for (const antigo of this.#proxima.keys()) {
      if (antigo === agregado || this.#espera.has(antigo) || this.#filas.has(antigo)) continue;
      this.#proxima.delete(antigo);
      this.#retidosCarregados.delete(antigo);
      if (this.#proxima.size <= this.#maxAgregados) break;
    }
  }

  /**
   * A próxima sequência de `agregado` passa a ser `proxima`: primeiro em
   * `sequencias` (se ele falhar, a memória esquece o agregado, que na
   * próxima vez é lido de novo), depois em memória. Lança ErroDeEstado.
   */
  async #avancar(agregado, proxima) {
    if (this.#sequencias !== undefined) {
      try {
        await this.#sequencias.definirProxima(agregado, proxima);
      } catch (erro) {
        this.#proxima.delete(agregado);
        throw new ErroDeEstado(erro);
      }
    }
    this.#lembrar(agregado, proxima);
  }

  /**
   * Aplica (ou pula, se for eco ou teste: ainda ocupa a sua sequência) o
   * próximo do agregado, avança a sequência e marca como visto — nessa
   * ordem: se marcar falhar, o reenvio ainda é repetido pela sequência.
   */
  async #passo(envelope, entrega, pular) {
    if (pular === undefined) await this.#aplicar(envelope, entrega);
    await this.#avancar(entrega.agregado, entrega.sequencia + 1);
    await this.#marcarVisto(envelope.id);
    if (pular !== undefined) this.#descartar(envelope.id, pular);
  }

  /** Tira um adiantado da espera (e de `retidos`). */
  async #esquecerRetido(agregado, espera, sequencia) {
    const vez = espera.get(sequencia);
    espera.delete(sequencia);
    if (vez !== undefined) this.#idsRetidos.delete(vez.envelope.id);
    await this.#removerRetido(agregado, sequencia);
  }

  /**
   * Aplica os adiantados consecutivos do agregado, em ordem, parando no
   * próximo buraco ou na primeira falha (que fica na frente).
   */
  async #drenar(agregado) {
    const espera = this.#espera.get(agregado);
    while (espera !== undefined && espera.size > 0) {
      const proxima = await this.#estadoDe(agregado);
      for (const sequencia of [...espera.keys()]) {
        // Já aplicada por outro caminho.
        if (sequencia < proxima) await this.#esquecerRetido(agregado, espera, sequencia);
      }
      const vez = espera.get(proxima);
      if (vez === undefined) break;
      await this.#passo(vez.envelope, vez.entrega, vez.pular);
      await this.#esquecerRetido(agregado, espera, proxima);
    }
    if (espera !== undefined && espera.size === 0 && this.#espera.get(agregado) === espera) {
      this.#espera.delete(agregado);
    }
  }

  /**
   * Tenta de novo os adiantados cuja vez chegou mas cujo aoAplicar (ou um
   * gancho de estado) falhou. Um CAD pode chamar num timer; o próximo
   * pedido do agregado também tenta.
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
    if (falhas.length > 0) throw new AggregateError(falhas, 'a drenagem falhou (aoAplicar ou um gancho de estado)');
  }

  /**
   * Põe a próxima sequência esperada de `agregado` em `proxima` e aplica os
   * retidos a partir dela: o passo 6 do reparo do guia (seção 16.1), quando
   * parte do agregado foi expurgada e não volta mais. Só avança: os retidos
   * abaixo de `proxima` são esquecidos sem aplicar. Com `sequencias`, grava
   * lá também. Roda na vez do agregado; rejeita com RangeError se `proxima`
   * for menor que a esperada, e com a falha de um gancho ou de aoAplicar
   * (que fica na frente, como na drenagem).
   *
   * @param {string} agregado
   * @param {number} proxima
   */
  async ajustarProxima(agregado, proxima) {
    if (typeof agregado !== 'string' || agregado === '') throw new TypeError('agregado é obrigatório');
    if (!Number.isSafeInteger(proxima) || proxima < 1) throw new RangeError(`proxima deve ser um inteiro ≥ 1, não ${proxima}`);
    await this.#naVez(agregado, async () => {
      const atual = await this.#estadoDe(agregado);
      if (proxima < atual) {
        throw new RangeError(`a próxima sequência de ${agregado} já é ${atual}: ela só avança (pedido ${proxima})`);
      }
      if (proxima > atual) await this.#avancar(agregado, proxima);
      await this.#drenar(agregado);
    });
  }

  /**
   * A próxima sequência esperada de `agregado`, como o receptor a vê agora
   * (de `sequencias`, se ainda não estava em memória). Roda na vez dele.
   * @returns {Promise<number>}
   */
  proximaDe(agregado) {
    return this.#naVez(agregado, () => this.#estadoDe(agregado));
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
  MAX_AGREGADOS_EM_MEMORIA,
  MOTIVO,
  TIPO_TESTE,
  TIPO_VERIFICACAO,
  TIPOS_DE_TESTE,
};
