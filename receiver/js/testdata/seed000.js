'use strict';
/*
 * O CÓDIGO DO GUIA, COMO FOI PUBLICADO — só para o teste de ponta a ponta.
 *
 * Este é o receptor JavaScript do seed 000 (guia do integrador, "5. O CAD
 * recebe o que aconteceu"): a segunda cópia, em JavaScript puro, de cada
 * trecho (CABECALHO, PLUGIN_DE_INTEGRACAO, TOLERANCIA_EM_SEGUNDOS,
 * assinaturaConfere, receber, enfileirar, despacho, aplicar), mantida
 * palavra por palavra; só a indentação foi refeita (a extração do guia a
 * perdeu). É a integração que a maioria dos CADs terá, e o Geohub precisa
 * funcionar com ela. NÃO use como modelo: o receptor de referência é
 * ../receptor.js.
 *
 * Os defeitos do guia ficam, de propósito:
 * - a linha de base é a primeira chegada (`?? sequencia - 1`), não 0;
 * - a espera não guarda a sequência de cada envelope, então `drenar` é um
 *   chute (veja abaixo);
 * - só lê X-Geohub-Assinatura (nunca X-Geohub-Assinatura-Anterior) e só
 *   conhece um segredo;
 * - lê origem.autoria.tipo sem guarda (o ehEnvelope abaixo exige autoria,
 *   porque o código do guia a lê);
 * - JSON.parse sem try: um corpo assinado que não é JSON rejeita a Promise
 *   de receber (o servir.js responde 500);
 * - o eco é descartado ANTES de enfileirar, sem consumir a sua sequência;
 * - um envelope com sequência já passada volta a sequência para trás.
 *
 * O que o guia não mostra e foi preenchido aqui, como o guia os descreve:
 * corpoCruDe, ehEnvelope, janelaConfere, drenar, despachoId, ocorrenciaId
 * e o construtor.
 */

const { createHmac, timingSafeEqual } = require('node:crypto');

// ---- Do guia, palavra por palavra. ----------------------------------------

const CABECALHO = {
  AGREGADO: 'x-geohub-agregado',
  ASSINATURA: 'x-geohub-assinatura',
  EVENTO_ID: 'x-geohub-evento-id',
  SEQUENCIA: 'x-geohub-sequencia',
  TIMESTAMP: 'x-geohub-timestamp',
};
/** O plugin do DESFECHO do comando — a resposta, não o eco. */
const PLUGIN_DE_INTEGRACAO = 'integracao';
/** ±5 min, dos dois lados: relógio adiantado é tão comum quanto atrasado. */
const TOLERANCIA_EM_SEGUNDOS = 300;

// ---- Preenchido: o que o guia usa e não mostra. ---------------------------

/** O corpo cru, como texto UTF-8 (o guia o concatena e faz JSON.parse). */
function corpoCruDe(req) {
  return new Promise((resolve, reject) => {
    const partes = [];
    req.on('data', (parte) => partes.push(parte));
    req.on('end', () => resolve(Buffer.concat(partes).toString('utf-8')));
    req.on('error', reject);
  });
}

/**
 * O envelope como o guia o mostra: id, ocorridoEm, origem { autoria { id,
 * tipo }, plugin, solicitacao, versao }, payload, tipo. Aceita o que o
 * Geohub manda (solicitacao só existe quando um comando causou o evento) e
 * exige o que o código do guia lê sem guarda: origem.plugin,
 * origem.autoria.tipo, origem.autoria.id e payload[...].
 */
function ehEnvelope(x) {
  return (
    typeof x === 'object' &&
    x !== null &&
    typeof x.id === 'string' &&
    typeof x.tipo === 'string' &&
    typeof x.ocorridoEm === 'string' &&
    typeof x.origem === 'object' &&
    x.origem !== null &&
    typeof x.origem.plugin === 'string' &&
    typeof x.origem.versao === 'string' &&
    typeof x.origem.autoria === 'object' &&
    x.origem.autoria !== null &&
    typeof x.origem.autoria.id === 'string' &&
    typeof x.origem.autoria.tipo === 'string' &&
    typeof x.payload === 'object' &&
    x.payload !== null &&
    !Array.isArray(x.payload)
  );
}

/** As marcas de identidade do TypeScript do guia: em JavaScript, o valor. */
function despachoId(id) {
  return id;
}
function ocorrenciaId(id) {
  return id;
}

class ReceptorDoGuia {
  /** @param {{segredo: string, integradorId: string}} opcoes */
  constructor(opcoes) {
    this.opcoes = opcoes;
    this.descartes = [];
    this.recebidos = [];
    this.vistos = new Set();
    this.sequencias = new Map();
    this.espera = new Map();
    this.aplicados = [];
    this.despachos = new Map();
    this.ocorrencias = new Map();
  }

  /** ±TOLERANCIA_EM_SEGUNDOS em torno de agora, em epoch segundos. */
  janelaConfere(cabecalhos) {
    const timestamp = Number(cabecalhos[CABECALHO.TIMESTAMP]);
    if (!Number.isFinite(timestamp)) return false;
    return Math.abs(Date.now() / 1000 - timestamp) <= TOLERANCIA_EM_SEGUNDOS;
  }

  /**
   * Drena o que esperava no agregado depois de aplicar `sequencia`.
   *
   * UM CHUTE: o guia chama drenar(agregado, sequencia) mas não o mostra, e a
   * espera dele guarda só os envelopes, sem a sequência de cada um — então
   * não há como saber qual é o próximo. O mais fiel que o guia permite:
   * aplicar os que esperam nesse agregado na ordem de chegada (o Geohub
   * tenta entregar em ordem, então a chegada costuma ser a ordem) e contar
   * a sequência como se fossem os consecutivos seguintes. Se houver outro
   * buraco entre eles, a ordem sai errada, e isso é o defeito do guia.
   */
  drenar(agregado, sequencia) {
    const esperando = this.espera.get(agregado);
    if (esperando === undefined) return;
    this.espera.delete(agregado);
    let ultima = sequencia;
    for (const envelope of esperando) {
      ultima += 1;
      this.sequencias.set(agregado, ultima);
      this.aplicar(envelope);
    }
  }

  // ---- Do guia, palavra por palavra. --------------------------------------

  /**
   * HMAC-SHA256 de `<timestamp>.<corpo cru>`, comparado em tempo constante.
   *
   * O timestamp entra DENTRO do HMAC: sem isso, trocá-lo seria grátis e a
   * janela de replay deixaria de existir.
   */
  assinaturaConfere(cabecalhos, corpo) {
    if (!this.janelaConfere(cabecalhos)) return false;
    const recebida = /^sha256=(?<hex>[0-9a-f]{64})$/u.exec(
      cabecalhos[CABECALHO.ASSINATURA] ?? '',
    )?.groups?.['hex'];
    if (recebida === undefined) return false;
    const esperada = createHmac('sha256', this.opcoes.segredo)
      .update(`${cabecalhos[CABECALHO.TIMESTAMP]}.${corpo}`, 'utf-8')
      .digest('hex');
    return timingSafeEqual(
      Buffer.from(recebida, 'hex'),
      Buffer.from(esperada, 'hex'),
    );
  }

  /**
   * O status que volta ao Geohub é a resposta do protocolo:
   *
   * - `401` — assinatura ou janela: o Geohub não insiste com quem recusa a
   * credencial dele;
   * - `400` — corpo que não é envelope: insistir não conserta;
   * - `204` — aceito. **Também para o repetido e para o eco**: eles foram
   * entregues com sucesso; o que se faz com eles é decisão de quem recebe,
   * e responder erro faria o Geohub reenviar para sempre.
   */
  async receber(req) {
    const corpo = await corpoCruDe(req);
    const cabecalhos = req.headers;
    // Sobre o corpo CRU e antes de qualquer parse: conferir depois provaria
    // a assinatura de outra coisa.
    if (!this.assinaturaConfere(cabecalhos, corpo)) {
      this.descartes.push({
        eventoId: cabecalhos[CABECALHO.EVENTO_ID],
        motivo: this.janelaConfere(cabecalhos)
          ? 'assinatura-invalida'
          : 'timestamp-fora-da-janela',
      });
      return 401;
    }
    const lido = JSON.parse(corpo);
    if (!ehEnvelope(lido)) {
      this.descartes.push({
        eventoId: cabecalhos[CABECALHO.EVENTO_ID],
        motivo: 'envelope-invalido',
      });
      return 400;
    }
    this.recebidos.push(lido);
    if (this.vistos.has(lido.id)) {
      this.descartes.push({ eventoId: lido.id, motivo: 'repetido' });
      return 204;
    }
    this.vistos.add(lido.id);
    /*
     * O eco é sobre fato de DOMÍNIO que este CAD causou. O desfecho
     * (`integracao:*`) também vem com a autoria dele — é assim que o Geohub
     * sabe a quem entregá-lo —, mas ele é a RESPOSTA ao comando, não o eco
     * dele: é por ele que o cliente que perdeu a resposta da chamada
     * descobre o id que nasceu (task-550). Descartá-lo seria jogar fora o
     * único retorno que o webhook traz.
     */
    if (
      lido.origem.plugin !== PLUGIN_DE_INTEGRACAO &&
      lido.origem.autoria.tipo === 'integrador' &&
      lido.origem.autoria.id === this.opcoes.integradorId
    ) {
      this.descartes.push({ eventoId: lido.id, motivo: 'eco-proprio' });
      return 204;
    }
    this.enfileirar(
      cabecalhos[CABECALHO.AGREGADO] ?? lido.id,
      Number(cabecalhos[CABECALHO.SEQUENCIA]),
      lido,
    );
    return 204;
  }

  /**
   * Aplica em ordem de `sequencia` **dentro do agregado**.
   *
   * A sequência é deste cadastro, por agregado: 1, 2, 3… sem buraco. O
   * Geohub tenta entregar em ordem, mas um evento que falha não segura os
   * seguintes — segurar transformaria um callback lento em fila parada.
   * Então o buraco na chegada é um evento em reenvio, e o que chega
   * adiantado espera por ele.
   *
   * Sequência ilegível (cabeçalho ausente ou adulterado) aplica na hora: o
   * cabeçalho **não** entra no HMAC, e travar a projeção por causa de um
   * metadado não provado seria entregar o controle a quem está no caminho.
   */
  enfileirar(agregado, sequencia, envelope) {
    if (!Number.isFinite(sequencia)) {
      this.aplicar(envelope);
      return;
    }
    const ultima = this.sequencias.get(agregado) ?? sequencia - 1;
    if (sequencia > ultima + 1) {
      const esperando = this.espera.get(agregado) ?? [];
      esperando.push(envelope);
      this.espera.set(agregado, esperando);
      return;
    }
    this.sequencias.set(agregado, sequencia);
    this.aplicar(envelope);
    this.drenar(agregado, sequencia);
  }

  /**
   * O estado de UM despacho.
   *
   * Nunca o estado "da ocorrência no local": `no_local` é propriedade do
   * despacho de uma viatura, e a ocorrência pode ter outra ainda em
   * deslocamento.
   */
  despacho(id) {
    return this.despachos.get(id);
  }

  /**
   * A projeção: o que o CAD mostra na tela.
   *
   * Três tipos bastam para o atendimento, e os três dizem coisas
   * diferentes:
   *
   * - `ocorrencia:despachada` — nasceu um despacho. É aqui que o
   * `despachoId` aparece pela primeira vez;
   * - `ocorrencia:despacho-mudou-status` — a chegada ao local é esta, com
   * `para: 'no_local'`. Não existe um `viatura-chegou`;
   * - `ocorrencia:mudou-status` — a OCORRÊNCIA mudou. `em_atendimento` é
   * consequência da PRIMEIRA chegada, e não diz nada sobre os outros
   * despachos.
   */
  aplicar(envelope) {
    this.aplicados.push(envelope);
    const payload = envelope.payload;
    if (envelope.tipo === 'ocorrencia:despachada') {
      const despacho = payload['despacho'];
      if (despacho === undefined) return;
      const id = despachoId(despacho.id);
      this.despachos.set(id, {
        despachoId: id,
        ocorrenciaId: ocorrenciaId(despacho.ocorrenciaId),
        ...(despacho.recurso?.identificador === undefined
          ? {}
          : { recurso: despacho.recurso.identificador }),
        status: despacho.status,
      });
      return;
    }
    if (envelope.tipo === 'ocorrencia:despacho-mudou-status') {
      const id = despachoId(String(payload['id']));
      const anterior = this.despachos.get(id);
      this.despachos.set(id, {
        despachoId: id,
        ocorrenciaId: ocorrenciaId(String(payload['ocorrenciaId'])),
        ...(anterior?.recurso === undefined
          ? {}
          : { recurso: anterior.recurso }),
        status: String(payload['para']),
      });
      return;
    }
    if (envelope.tipo === 'ocorrencia:mudou-status') {
      this.ocorrencias.set(
        ocorrenciaId(String(payload['id'])),
        String(payload['para']),
      );
    }
  }
}

module.exports = {
  ReceptorDoGuia,
  CABECALHO,
  PLUGIN_DE_INTEGRACAO,
  TOLERANCIA_EM_SEGUNDOS,
  corpoCruDe,
  ehEnvelope,
  despachoId,
  ocorrenciaId,
};
