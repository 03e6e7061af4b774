'use strict';
/**
 * Cliente da entrega por sessão do Geohub (guia do integrador, seção 2.1),
 * para Node.js, sem dependências (só `node:`).
 *
 * Um CAD sem URL pública (atrás de NAT ou de um firewall) não recebe
 * webhooks: ele mesmo abre um websocket em `GET /api/sessao` com a sua
 * `api_key`, e cada entrega chega como uma mensagem de texto — os
 * cabeçalhos do webhook em minúsculas mais `corpo`, o envelope byte a byte.
 * Este cliente entrega cada mensagem ao mesmo `Receptor` do webhook
 * (`receptor.js`, por `receberEntrega`), que confere a assinatura, deduplica,
 * descarta o eco e ordena por agregado, e responde `{"ack": id}` quando o
 * receptor aceitou (2xx) ou `{"nack": id, "motivo": "..."}` quando não.
 *
 * Uso:
 *
 *   const { Receptor } = require('./receptor');
 *   const { SessaoGeohub } = require('./sessao');
 *   const receptor = new Receptor({
 *     segredos: [process.env.SEGREDO_ATUAL, process.env.SEGREDO_ANTERIOR],
 *     integradorId: process.env.INTEGRADOR_ID,
 *     aoAplicar: (envelope, entrega) => { ... },
 *   });
 *   const sessao = new SessaoGeohub({
 *     url: 'https://geohub.exemplo.gov.br',
 *     apiKey: process.env.GEOHUB_API_KEY,
 *     receptor,
 *   });
 *   const { codigo, motivo } = await sessao.iniciar(); // só volta no fim
 *
 * O websocket é o `globalThis.WebSocket` (Node.js 22 ou mais novo; no
 * Node.js 20, `node --experimental-websocket`), ou o construtor passado em
 * `opcoes.WebSocket` (por exemplo o do pacote `ws`). A chave vai no
 * cabeçalho `Authorization`, pelo segundo argumento `{ headers }` que o
 * WebSocket do Node (undici) e o do `ws` aceitam; o de um navegador não
 * aceita, e por isso este cliente é só para Node.js.
 *
 * Reconexão: quando a conexão cai, quando o servidor encerra (1001), quando
 * o handshake falha por rede ou quando o servidor fica calado por
 * `silencioMaximoMs`, o cliente reconecta com espera crescente (1 s, 2 s,
 * 4 s... até 60 s; volta a 1 s depois de uma sessão que entregou alguma
 * coisa ou durou 30 s). NÃO reconecta depois de 4000 (outra sessão com a
 * mesma chave assumiu: reconectar faria duas instâncias do CAD se
 * derrubarem sem fim), 1008 (chave rotacionada ou integrador inativo), 4001
 * (o integrador recebe por callback) ou de um handshake recusado com 401
 * (chave inválida): a Promise de `iniciar()` resolve com o código e o motivo,
 * e quem decide o que fazer é o CAD (ou o seu operador).
 *
 * O limite do servidor morto: o servidor manda um ping a cada 10 s, mas a
 * API WebSocket padrão (WHATWG) não mostra pings a quem a usa. Por isso a
 * vida da conexão é medida pelas mensagens e, quando dá para ver, pelos
 * pings: o evento `ping` de um construtor como o do `ws`, ou, no WebSocket
 * do Node, o canal de diagnóstico `undici:websocket:ping`, que avisa de um
 * ping mas não diz de qual conexão (com várias sessões no mesmo processo,
 * um ping de qualquer uma conta como vida para todas). Num WebSocket que não
 * mostra ping nenhum, uma sessão ociosa por `silencioMaximoMs` é dada por
 * morta e reconecta: nada se perde (o que estava sem resposta vem de novo),
 * mas o servidor registra uma sessão nova a cada `silencioMaximoMs`.
 */

const diagnosticsChannel = require('node:diagnostics_channel');

const { MOTIVO } = require('./receptor.js');

/** Os códigos de fechamento da sessão (guia, seção 2.1). */
const CODIGO = Object.freeze({
  /** Fechamento normal: o que `encerrar()` manda. */
  NORMAL: 1000,
  /** O servidor está encerrando: reconecte. */
  SERVIDOR_ENCERRANDO: 1001,
  /** A conexão caiu sem fechamento (inclusive um handshake que falhou). */
  ANORMAL: 1006,
  /** Integrador inativo ou `api_key` rotacionada: não reconecte. */
  POLITICA: 1008,
  /** Substituída por outra sessão do mesmo integrador: não reconecte. */
  SUBSTITUIDA: 4000,
  /** O integrador recebe por callback, não por sessão: não reconecte. */
  NAO_E_SESSAO: 4001,
  /** O servidor recusou uma resposta (nem ack nem nack com id). */
  RESPOSTA_INVALIDA: 4002,
  /**
   * Não é um código de websocket: o handshake foi recusado com HTTP 401
   * (chave inválida), visto por um GET à mesma rota depois da falha.
   */
  CHAVE_RECUSADA: 401,
});

/** Depois destes, reconectar sozinho só repetiria o problema (ou criaria um). */
const FINAIS = new Set([CODIGO.POLITICA, CODIGO.SUBSTITUIDA, CODIGO.NAO_E_SESSAO, CODIGO.CHAVE_RECUSADA]);

/** Os estados que `aoMudarEstado` recebe. */
const ESTADO = Object.freeze({
  PARADA: 'parada',
  CONECTANDO: 'conectando',
  CONECTADA: 'conectada',
  AGUARDANDO: 'aguardando',
  ENCERRADA: 'encerrada',
});

/** O servidor pinga a cada 10 s e desiste de um CAD calado em 25 s. */
const SILENCIO_MAXIMO_MS = 30000;

/** Uma sessão que durou isto sem cair zera a espera da reconexão. */
const SESSAO_ESTAVEL_MS = 30000;

/** Quanto `encerrar()` espera o fechamento antes de dar a sessão por encerrada. */
const PRAZO_DO_FECHAMENTO_MS = 2000;

/** Em caracteres: cabe nos 512 bytes que o Geohub guarda da resposta. */
const TAMANHO_DO_MOTIVO = 500;

/** Quanto esperar, depois de um error, pelo close que deveria vir junto. */
const ESPERA_DO_CLOSE_MS = 250;

/** `readyState` de uma conexão aberta, na API WHATWG e no `ws`. */
const ABERTA = 1;

/**
 * Para o motivo do nack: os descartes do receptor que explicam cada status.
 * Só um descarte coerente com o status serve (um descarte antigo do mesmo
 * evento, de outra tentativa, não explica esta).
 */
const MOTIVOS_DO_STATUS = {
  400: [MOTIVO.ENVELOPE_INVALIDO],
  401: [MOTIVO.ASSINATURA_INVALIDA, MOTIVO.FORA_DA_JANELA],
  413: [MOTIVO.CORPO_GRANDE],
  500: [MOTIVO.FALHA_AO_APLICAR],
  503: [MOTIVO.SEM_SEGREDO, MOTIVO.ESPERA_CHEIA, MOTIVO.ESTADO_INDISPONIVEL],
};

const TEXTO_DO_STATUS = {
  400: 'o corpo não é um envelope',
  401: 'assinatura ou timestamp recusados pelo receptor',
  413: 'corpo acima do limite do receptor',
  500: 'o receptor não conseguiu aplicar',
  503: 'o receptor pediu para tentar depois',
};

/**
 * O motivo de uma conexão que estava aberta e acabou sem motivo do servidor
 * (a API WebSocket dá um `reason` vazio a uma queda de rede).
 */
function motivoSemTexto(codigo) {
  if (codigo === CODIGO.ANORMAL) return 'a conexão caiu, sem fechamento do servidor';
  if (codigo === CODIGO.SERVIDOR_ENCERRANDO) return 'o servidor está encerrando';
  return `o servidor fechou a conexão (código ${codigo})`;
}

/** A causa de uma falha de `fetch` (o undici diz só "fetch failed"). */
function causaDe(erro) {
  const causa = erro?.cause?.message ?? erro?.cause?.code;
  return String(causa ?? erro?.message ?? erro);
}

const SEM_WEBSOCKET =
  'sessao.js precisa de um WebSocket: use Node.js 22 ou mais novo, ou Node.js 20 com ' +
  '`node --experimental-websocket`, ou passe o construtor de outra biblioteca em ' +
  "opcoes.WebSocket (por exemplo o do pacote ws: `new SessaoGeohub({ WebSocket: require('ws'), ... })`)";

/**
 * As URLs da sessão a partir da base do Geohub (`https://host[/prefixo]`):
 * a do websocket (`wss://host[/prefixo]/api/sessao`) e a mesma rota em
 * http(s), para perguntar por que um handshake foi recusado.
 */
function urlsDaSessao(base) {
  let u;
  try {
    u = new URL(String(base));
  } catch {
    throw new TypeError(`url inválida: ${base} (use a base do Geohub, como https://geohub.exemplo.gov.br)`);
  }
  const ws = { 'http:': 'ws:', 'https:': 'wss:', 'ws:': 'ws:', 'wss:': 'wss:' }[u.protocol];
  if (ws === undefined) {
    throw new TypeError(`url com esquema ${u.protocol}: use http(s):// ou ws(s)://, como https://geohub.exemplo.gov.br`);
  }
  u.search = '';
  u.hash = '';
  const caminho = u.pathname.replace(/\/+$/u, '');
  u.pathname = caminho.endsWith('/api/sessao') ? caminho : `${caminho}/api/sessao`;
  const http = new URL(u.toString());
  http.protocol = ws === 'wss:' ? 'https:' : 'http:';
  u.protocol = ws;
  return { ws: u.toString(), http: http.toString() };
}

function ehObjeto(x) {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** O texto de uma mensagem; `undefined` para o que não dá para ler já. */
function textoDe(dados) {
  if (typeof dados === 'string') return dados;
  if (dados instanceof ArrayBuffer) return Buffer.from(dados).toString('utf8');
  if (ArrayBuffer.isView(dados)) return Buffer.from(dados.buffer, dados.byteOffset, dados.byteLength).toString('utf8');
  return undefined;
}

/**
 * A sessão de um CAD com o Geohub. Veja o comentário do topo do arquivo.
 */
class SessaoGeohub {
  #urlWs;
  #urlHttp;
  #apiKey;
  #receptor;
  #WebSocket;
  #fetch;
  #esperaMinima;
  #esperaMaxima;
  #silencioMaximo;
  #aoMudarEstado;
  #aoAviso;

  #estado = ESTADO.PARADA;
  /** A conexão corrente: `{ socket, aberta, abertaEm, entregas, erro }`. */
  #atual = null;
  /** Reconexões seguidas sem uma sessão que valesse: o expoente da espera. */
  #falhas = 0;
  #timerReconexao;
  #timerSilencio;
  #timerFechamento;
  #encerrando = false;
  #fim;
  #resolverFim;
  #aoPing = () => {
    const conexao = this.#atual;
    if (conexao !== null && conexao.aberta && conexao.pingPeloCanal) this.#armarSilencio(conexao);
  };

  /**
   * @param {object} opcoes
   * @param {string} opcoes.url a base do Geohub, `https://host` (ou
   *   `http://` num teste local); `wss://host/api/sessao` sai dela
   * @param {string} opcoes.apiKey a `api_key` (`gk_…`) de um integrador
   *   cadastrado com `"entrega": "sessao"`
   * @param {{receberEntrega: (cabecalhos: object, corpo: string) => Promise<number>}} opcoes.receptor
   *   o `Receptor` de `receptor.js`, ou qualquer objeto com `receberEntrega`
   *   que devolva um status HTTP (2xx vira ack; o resto, nack)
   * @param {Function} [opcoes.WebSocket] o construtor; padrão
   *   `globalThis.WebSocket`
   * @param {number} [opcoes.esperaMinimaMs] a primeira espera antes de
   *   reconectar; padrão 1000
   * @param {number} [opcoes.esperaMaximaMs] o teto da espera; padrão 60000
   * @param {number} [opcoes.silencioMaximoMs] sem mensagem nem ping por este
   *   tempo (também num handshake que não termina), a conexão é dada por
   *   morta; padrão 30000
   * @param {(mudanca: {estado: string, codigo?: number, motivo?: string, detalhe?: string, esperaMs?: number}) => void} [opcoes.aoMudarEstado]
   *   avisado de cada mudança de ESTADO; `codigo` e `motivo` (em português)
   *   dizem por que a conexão acabou (em `aguardando` e `encerrada`),
   *   `detalhe`, quando há, o erro como veio da rede ou da biblioteca
   *   (em inglês, no WebSocket do Node), `esperaMs` quanto falta para
   *   reconectar
   * @param {(texto: string) => void} [opcoes.aoAviso] o que não para a
   *   sessão mas alguém deveria ver (mensagem ilegível, resposta recusada);
   *   padrão console.warn
   * @param {typeof fetch} [opcoes.fetch] para perguntar por que um
   *   handshake falhou; padrão globalThis.fetch
   */
  constructor(opcoes = {}) {
    const { ws, http } = urlsDaSessao(opcoes.url);
    this.#urlWs = ws;
    this.#urlHttp = http;
    if (typeof opcoes.apiKey !== 'string' || opcoes.apiKey.trim() === '') {
      throw new TypeError('apiKey é obrigatória: a api_key (gk_…) do integrador cadastrado com "entrega": "sessao"');
    }
    this.#apiKey = opcoes.apiKey.trim();
    if (typeof opcoes.receptor?.receberEntrega !== 'function') {
      throw new TypeError('receptor é obrigatório: um Receptor de receptor.js (ou um objeto com receberEntrega)');
    }
    this.#receptor = opcoes.receptor;
    this.#WebSocket = opcoes.WebSocket ?? globalThis.WebSocket;
    if (typeof this.#WebSocket !== 'function') throw new Error(SEM_WEBSOCKET);
    this.#fetch = opcoes.fetch ?? globalThis.fetch;
    this.#esperaMinima = Math.max(1, opcoes.esperaMinimaMs ?? 1000);
    this.#esperaMaxima = Math.max(this.#esperaMinima, opcoes.esperaMaximaMs ?? 60000);
    this.#silencioMaximo = Math.max(1, opcoes.silencioMaximoMs ?? SILENCIO_MAXIMO_MS);
    this.#aoMudarEstado = opcoes.aoMudarEstado;
    this.#aoAviso = opcoes.aoAviso ?? ((texto) => console.warn(`[geohub-sessao] ${texto}`));
    this.#fim = new Promise((resolver) => {
      this.#resolverFim = resolver;
    });
  }

  /** O estado agora: um dos valores de ESTADO. */
  get estado() {
    return this.#estado;
  }

  /** A URL do websocket, derivada de `opcoes.url`. */
  get url() {
    return this.#urlWs;
  }

  /**
   * Resolve com `{ codigo, motivo }` quando a sessão acaba de vez: um dos
   * códigos que não reconectam, ou `encerrar()`. Nunca rejeita.
   * @returns {Promise<{codigo: number, motivo: string}>}
   */
  get fim() {
    return this.#fim;
  }

  /**
   * Conecta, e reconecta sempre que vale a pena, até o fim. Devolve `fim`.
   * Chamar de novo não abre outra conexão.
   */
  iniciar() {
    if (this.#estado === ESTADO.PARADA) {
      diagnosticsChannel.subscribe('undici:websocket:ping', this.#aoPing);
      this.#conectar();
    }
    return this.#fim;
  }

  /**
   * Fecha a sessão (1000) e não reconecta. Resolve com `fim`, em até 2 s
   * mesmo que o servidor não responda ao fechamento.
   */
  encerrar() {
    if (this.#estado === ESTADO.ENCERRADA) return this.#fim;
    this.#encerrando = true;
    clearTimeout(this.#timerReconexao);
    clearTimeout(this.#timerSilencio);
    const conexao = this.#atual;
    const fim = { codigo: CODIGO.NORMAL, motivo: 'encerrada pelo CAD' };
    if (conexao === null) {
      this.#terminar(fim);
      return this.#fim;
    }
    this.#fechar(conexao, CODIGO.NORMAL, fim.motivo);
    this.#timerFechamento = setTimeout(() => this.#terminar(fim), PRAZO_DO_FECHAMENTO_MS);
    return this.#fim;
  }

  /**
   * Larga a conexão corrente como se ela tivesse caído, e reconecta depois
   * da espera. Para testar a reconexão (e o reenvio do que ficou sem
   * resposta) sem derrubar a rede. O que estiver sendo aplicado continua,
   * mas a resposta não vai para a conexão nova: o Geohub manda de novo.
   */
  derrubar() {
    const conexao = this.#atual;
    if (conexao === null || this.#encerrando) return;
    this.#largar(conexao, CODIGO.ANORMAL, 'derrubada pelo CAD');
  }

  #mudar(estado, detalhe = {}) {
    this.#estado = estado;
    if (this.#aoMudarEstado === undefined) return;
    try {
      this.#aoMudarEstado({ estado, ...detalhe });
    } catch {
      // Um aviso que falha não muda a sessão.
    }
  }

  #avisar(texto) {
    try {
      this.#aoAviso(texto);
    } catch {
      // idem
    }
  }

  #conectar() {
    if (this.#encerrando || this.#estado === ESTADO.ENCERRADA) return;
    this.#mudar(ESTADO.CONECTANDO);
    const conexao = { socket: null, aberta: false, abertaEm: 0, entregas: 0, erro: undefined, pingPeloCanal: false };
    this.#atual = conexao;
    try {
      conexao.socket = new this.#WebSocket(this.#urlWs, { headers: { Authorization: `Bearer ${this.#apiKey}` } });
    } catch (erro) {
      this.#atual = null;
      this.#avisar(`não foi possível abrir ${this.#urlWs}: ${erro?.message ?? erro}`);
      this.#reconectar(conexao, CODIGO.ANORMAL, 'não foi possível abrir o websocket', String(erro?.message ?? erro));
      return;
    }
    const socket = conexao.socket;
    try {
      socket.binaryType = 'arraybuffer';
    } catch {
      // Um construtor sem binaryType só manda texto como string, que basta.
    }
    // Um handshake que não termina também é silêncio.
    this.#armarSilencio(conexao);
    if (typeof socket.on === 'function') {
      // O ws mostra os pings desta conexão.
      socket.on('ping', () => {
        if (this.#atual === conexao) this.#armarSilencio(conexao);
      });
    } else {
      conexao.pingPeloCanal = true;
    }
    socket.addEventListener('open', () => {
      if (this.#atual !== conexao) return;
      conexao.aberta = true;
      conexao.abertaEm = Date.now();
      this.#armarSilencio(conexao);
      this.#mudar(ESTADO.CONECTADA);
    });
    socket.addEventListener('message', (evento) => {
      if (this.#atual !== conexao) return; // largada: o Geohub manda de novo
      this.#armarSilencio(conexao);
      this.#aoMensagem(conexao, evento.data);
    });
    socket.addEventListener('error', (evento) => {
      // O primeiro erro é a causa; os seguintes vêm do próprio fechamento.
      conexao.erro ??= evento?.error?.message ?? evento?.message;
      // O WebSocket do Node 20 (undici 6) avisa um handshake recusado (um
      // 401, por exemplo) só com error, sem o close que a especificação
      // manda vir depois: sem este prazo, a conexão só seria largada pelo
      // silêncio.
      setTimeout(() => {
        if (this.#atual !== conexao) return;
        this.#atual = null;
        clearTimeout(this.#timerSilencio);
        this.#fechar(conexao, CODIGO.NORMAL, 'erro na conexão');
        this.#aoFechar(conexao, CODIGO.ANORMAL, '');
      }, ESPERA_DO_CLOSE_MS);
    });
    socket.addEventListener('close', (evento) => {
      if (this.#atual !== conexao) return;
      this.#atual = null;
      clearTimeout(this.#timerSilencio);
      this.#aoFechar(conexao, evento?.code ?? CODIGO.ANORMAL, evento?.reason ?? '');
    });
  }

  async #aoFechar(conexao, codigo, motivo) {
    if (this.#encerrando) {
      this.#terminar({ codigo: CODIGO.NORMAL, motivo: 'encerrada pelo CAD' });
      return;
    }
    if (FINAIS.has(codigo)) {
      this.#terminar({ codigo, motivo });
      return;
    }
    if (codigo === CODIGO.RESPOSTA_INVALIDA) {
      this.#avisar(`o Geohub recusou uma resposta deste cliente (4002): ${motivo}`);
    }
    // O erro da biblioteca (o do WebSocket do Node vem em inglês, como
    // "Received network error or non-101 status code.") vai em `detalhe`;
    // o motivo é sempre em português.
    let detalhe = conexao.erro;
    if (!conexao.aberta) {
      // A API WebSocket não diz o status HTTP de um handshake recusado: a
      // mesma rota, sem upgrade, diz se o problema é a chave (401), que
      // nenhuma reconexão conserta, ou se o Geohub nem responde.
      const falha = await this.#porQueNaoAbriu();
      if (this.#encerrando || this.#estado === ESTADO.ENCERRADA) return;
      if (falha.chaveRecusada) {
        this.#terminar({ codigo: CODIGO.CHAVE_RECUSADA, motivo: falha.motivo });
        return;
      }
      motivo = motivo || falha.motivo;
      detalhe = [conexao.erro, falha.detalhe].filter((x) => x !== undefined && x !== '').join('; ') || undefined;
    } else if (motivo === '') {
      motivo = motivoSemTexto(codigo);
    }
    this.#reconectar(conexao, codigo, motivo, detalhe);
  }

  /**
   * Por que um handshake não abriu, perguntado a `GET /api/sessao` sem
   * upgrade: `{ chaveRecusada: true, motivo }` num 401; senão
   * `{ motivo, detalhe }`, o que dá para dizer em português.
   */
  async #porQueNaoAbriu() {
    if (typeof this.#fetch !== 'function') return { motivo: 'o websocket da sessão não abriu' };
    let resposta;
    let corpo;
    try {
      resposta = await this.#fetch(this.#urlHttp, {
        headers: { Authorization: `Bearer ${this.#apiKey}` },
        signal: AbortSignal.timeout(5000),
      });
      corpo = String(await resposta.text());
    } catch (erro) {
      // O servidor fora do ar: a reconexão tenta de novo.
      return {
        motivo: 'o Geohub não respondeu: fora do ar, ou sem rede até ele',
        detalhe: `GET ${this.#urlHttp}: ${causaDe(erro)}`,
      };
    }
    const status = resposta.status;
    if (status === 401) {
      let erro;
      try {
        erro = JSON.parse(corpo).erro;
      } catch {
        erro = undefined;
      }
      return { chaveRecusada: true, motivo: `a chave de API foi recusada (HTTP 401): ${typeof erro === 'string' ? erro : corpo.trim()}` };
    }
    if (status >= 500) {
      return {
        motivo: `o Geohub (ou um proxy na frente dele) respondeu HTTP ${status}: fora do ar ou sobrecarregado`,
        detalhe: `GET ${this.#urlHttp}: HTTP ${status}`,
      };
    }
    return {
      motivo: `o websocket não abriu, mas o Geohub responde (HTTP ${status} sem upgrade): a rede ou um proxy no caminho pode estar barrando o websocket`,
      detalhe: `GET ${this.#urlHttp}: HTTP ${status}`,
    };
  }

  #reconectar(conexao, codigo, motivo, detalhe) {
    // Volta à espera mínima depois de uma sessão que valeu: entregou alguma
    // coisa ou durou SESSAO_ESTAVEL_MS (a mesma regra do cliente em Go).
    const durou = conexao.aberta && Date.now() - conexao.abertaEm >= SESSAO_ESTAVEL_MS;
    if (conexao.entregas > 0 || durou) this.#falhas = 0;
    const esperaMs = Math.min(this.#esperaMinima * 2 ** this.#falhas, this.#esperaMaxima);
    // O teto evita 2 ** n infinito numa queda que dura dias.
    this.#falhas = Math.min(this.#falhas + 1, 40);
    this.#mudar(ESTADO.AGUARDANDO, { codigo, motivo, ...(detalhe === undefined ? {} : { detalhe }), esperaMs });
    this.#timerReconexao = setTimeout(() => this.#conectar(), esperaMs);
  }

  #armarSilencio(conexao) {
    clearTimeout(this.#timerSilencio);
    this.#timerSilencio = setTimeout(() => {
      if (this.#atual !== conexao) return;
      this.#avisar(`nada do Geohub em ${this.#silencioMaximo} ms: a conexão é dada por morta`);
      this.#largar(conexao, CODIGO.ANORMAL, 'sem mensagem nem ping do servidor');
    }, this.#silencioMaximo);
  }

  /**
   * Larga uma conexão sem esperar o evento `close`: de um servidor morto ele
   * só viria quando o TCP desistisse, minutos depois.
   */
  #largar(conexao, codigo, motivo) {
    this.#atual = null;
    clearTimeout(this.#timerSilencio);
    this.#fechar(conexao, CODIGO.NORMAL, motivo);
    this.#reconectar(conexao, codigo, motivo);
  }

  #fechar(conexao, codigo, motivo) {
    try {
      conexao.socket?.close(codigo, motivo);
    } catch {
      // Já fechada.
    }
  }

  #terminar(fim) {
    if (this.#estado === ESTADO.ENCERRADA) return;
    clearTimeout(this.#timerReconexao);
    clearTimeout(this.#timerSilencio);
    clearTimeout(this.#timerFechamento);
    diagnosticsChannel.unsubscribe('undici:websocket:ping', this.#aoPing);
    const conexao = this.#atual;
    this.#atual = null;
    if (conexao !== null) this.#fechar(conexao, CODIGO.NORMAL, fim.motivo);
    this.#mudar(ESTADO.ENCERRADA, fim);
    this.#resolverFim(fim);
  }

  /**
   * Uma mensagem do servidor. O que não dá para ler é avisado e ignorado:
   * sem o id da entrega não há a que responder, e o Geohub, sem resposta,
   * conta um timeout e manda de novo.
   */
  #aoMensagem(conexao, dados) {
    const texto = textoDe(dados);
    if (texto === undefined) {
      this.#avisar('mensagem que não é texto, ignorada');
      return;
    }
    let mensagem;
    try {
      mensagem = JSON.parse(texto);
    } catch (erro) {
      this.#avisar(`mensagem que não é JSON, ignorada: ${erro.message}`);
      return;
    }
    const entregaId = ehObjeto(mensagem) ? mensagem['x-geohub-entrega-id'] : undefined;
    if (typeof entregaId !== 'string' || entregaId === '') {
      this.#avisar('mensagem sem x-geohub-entrega-id, ignorada');
      return;
    }
    conexao.entregas += 1;
    if (typeof mensagem.corpo !== 'string') {
      this.#responder(conexao, { nack: entregaId, motivo: 'mensagem sem corpo' });
      return;
    }
    const cabecalhos = {};
    for (const [nome, valor] of Object.entries(mensagem)) {
      if (nome !== 'corpo' && typeof valor === 'string') cabecalhos[nome.toLowerCase()] = valor;
    }
    // Sem await: cada mensagem segue sozinha, e o Receptor já põe em fila
    // as do mesmo agregado (o Geohub manda até 16 agregados ao mesmo tempo).
    this.#entregar(conexao, entregaId, cabecalhos, mensagem.corpo);
  }

  async #entregar(conexao, entregaId, cabecalhos, corpo) {
    let status;
    let falha;
    try {
      status = await this.#receptor.receberEntrega(cabecalhos, corpo);
    } catch (erro) {
      status = 500;
      falha = erro;
    }
    if (Number.isInteger(status) && status >= 200 && status < 300) {
      this.#responder(conexao, { ack: entregaId });
      return;
    }
    // O Geohub guarda 512 bytes do motivo e lê no máximo 4 KiB por
    // resposta: uma mensagem de erro enorme derrubaria a sessão.
    const motivo = [...this.#motivo(status, cabecalhos, falha)].slice(0, TAMANHO_DO_MOTIVO).join('');
    this.#responder(conexao, { nack: entregaId, motivo });
  }

  /** O motivo de um nack: o status e, quando o receptor o registrou, o descarte. */
  #motivo(status, cabecalhos, falha) {
    if (falha !== undefined) return `500 o receptor falhou: ${falha?.message ?? falha}`;
    const eventoId = cabecalhos['x-geohub-evento-id'];
    const coerentes = MOTIVOS_DO_STATUS[status] ?? [];
    let descarte;
    if (coerentes.length > 0 && typeof this.#receptor.descartes === 'function') {
      try {
        descarte = this.#receptor.descartes().findLast((d) => d.eventoId === eventoId && coerentes.includes(d.motivo));
      } catch {
        descarte = undefined;
      }
    }
    return `${status} ${descarte?.motivo ?? TEXTO_DO_STATUS[status] ?? 'recusada pelo receptor'}`;
  }

  /**
   * Responde na conexão de onde a entrega veio, e só se ela ainda está
   * aberta: numa conexão nova o id seria de outra sessão, e o Geohub já vai
   * mandar a entrega de novo.
   */
  #responder(conexao, resposta) {
    if (conexao.socket?.readyState !== ABERTA) return;
    try {
      conexao.socket.send(JSON.stringify(resposta));
    } catch (erro) {
      this.#avisar(`a resposta não foi enviada: ${erro?.message ?? erro}`);
    }
  }
}

module.exports = {
  SessaoGeohub,
  CODIGO,
  ESTADO,
  SILENCIO_MAXIMO_MS,
  urlsDaSessao,
};
