'use strict';
// Testes do receptor de referência: uma ou mais por obrigação, contra um
// servidor node:http de verdade em 127.0.0.1 e pedidos assinados de verdade.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { Receptor, assinar, ehEnvelope, LIMITE_DO_CORPO, MOTIVO, TIPOS_DE_TESTE } = require('./receptor.js');
const { umEnvelope, servir, pedir, cabecalhosDoGeohub } = require('./testdata/ajuda.js');

const AGORA = 1761912251; // epoch segundos; o relógio dos receptores dos testes
const SEGREDO = 'whsec-atual';
const ANTIGO = 'whsec-antigo';
const EU = 'cad-1'; // o id deste cadastro

/**
 * Um receptor servido em 127.0.0.1, com o relógio parado em AGORA, e um
 * `enviar(envelope|corpo, opcoes)` que assina como o Geohub.
 */
async function montar(t, opcoes = {}) {
  const chamadas = [];
  const receptor = new Receptor({
    segredos: [SEGREDO],
    integradorId: EU,
    agora: () => AGORA * 1000,
    aoAplicar: (envelope, entrega) => {
      chamadas.push({ envelope, entrega });
    },
    ...opcoes,
  });
  const porta = await servir(t, receptor.tratar);
  const enviar = (envelopeOuCorpo, o = {}) => {
    const corpo = typeof envelopeOuCorpo === 'string' || Buffer.isBuffer(envelopeOuCorpo)
      ? envelopeOuCorpo
      : JSON.stringify(envelopeOuCorpo);
    const cabecalhos = {
      ...cabecalhosDoGeohub(corpo, { segredo: SEGREDO, ts: AGORA, sequencia: 1, ...o }),
      ...o.cabecalhos,
    };
    return pedir(porta, { corpo, cabecalhos });
  };
  const ids = () => chamadas.map((c) => c.envelope.id);
  return { receptor, porta, enviar, chamadas, ids };
}

const motivos = (receptor) => receptor.descartes().map((d) => d.motivo);

// ---- A assinatura (vetores compartilhados com o servidor e o SDK Go). ----

const vetores = JSON.parse(fs.readFileSync(path.join(__dirname, 'testdata', 'assinatura.json'), 'utf8'));

test('assinar reproduz os vetores de assinatura', () => {
  assert.ok(vetores.casos.length >= 4);
  for (const caso of vetores.casos) {
    assert.equal(assinar(caso.segredo, caso.timestamp, caso.corpo), caso.assinatura, caso.nome);
    assert.equal(assinar(Buffer.from(caso.segredo), Number(caso.timestamp), Buffer.from(caso.corpo)), caso.assinatura);
  }
});

test('o receptor aceita a assinatura de cada vetor, e recusa com um dígito trocado', async (t) => {
  for (const caso of vetores.casos) {
    const receptor = new Receptor({ segredo: caso.segredo, agora: () => Number(caso.timestamp) * 1000 });
    const porta = await servir(t, receptor.tratar);
    const cabecalhos = { 'X-Geohub-Timestamp': caso.timestamp, 'X-Geohub-Assinatura': caso.assinatura };
    const { status } = await pedir(porta, { corpo: caso.corpo, cabecalhos });
    // Só o primeiro vetor é um envelope inteiro; os outros passam pela
    // assinatura e param no 400 (não são envelope).
    assert.equal(status, caso.nome === 'envelope do exemplo' ? 204 : 400, caso.nome);

    const ultimo = caso.assinatura.at(-1) === '0' ? '1' : '0';
    const trocada = caso.assinatura.slice(0, -1) + ultimo;
    const r = await pedir(porta, { corpo: caso.corpo, cabecalhos: { ...cabecalhos, 'X-Geohub-Assinatura': trocada } });
    assert.equal(r.status, 401, caso.nome);
  }
});

// ---- Obrigação 1: assinatura sobre o corpo cru, janela, tempo constante. ----

test('1: assinatura errada, ausente ou de outro corpo responde 401 e não aplica', async (t) => {
  const { receptor, enviar, chamadas } = await montar(t);
  const e = umEnvelope();
  const corpo = JSON.stringify(e);
  assert.equal((await enviar(corpo, { segredo: 'outro-segredo' })).status, 401);
  assert.equal((await enviar(corpo, { cabecalhos: { 'X-Geohub-Assinatura': 'sha256=abc' } })).status, 401);
  assert.equal((await enviar(corpo, { cabecalhos: { 'X-Geohub-Assinatura': '' } })).status, 401);
  // Assinado um corpo, enviado outro (um byte a mais).
  const assinado = cabecalhosDoGeohub(corpo, { segredo: SEGREDO, ts: AGORA, sequencia: 1 });
  assert.equal((await enviar(`${corpo} `, { cabecalhos: assinado })).status, 401);
  assert.equal(chamadas.length, 0);
  assert.deepEqual(motivos(receptor), Array(4).fill(MOTIVO.ASSINATURA_INVALIDA));
});

test('1: confere sobre os bytes crus, antes do parse', async (t) => {
  const { enviar, chamadas } = await montar(t);
  // Espaços e quebras de linha que um parse + stringify perderia.
  const formatado = JSON.stringify(umEnvelope(), null, 2);
  assert.equal((await enviar(formatado, { sequencia: null })).status, 204);
  // Um byte que não é UTF-8 dentro de uma string, assinado sobre os bytes
  // como foram: passa (ler como texto e assinar o texto o trocaria por
  // U+FFFD, e a assinatura seria de outra coisa).
  const cru = Buffer.from(JSON.stringify(umEnvelope({ payload: { nota: 'X' } })), 'utf8');
  cru[cru.indexOf('"X"') + 1] = 0xff;
  assert.equal((await enviar(cru, { sequencia: null })).status, 204);
  assert.equal(chamadas.length, 2);
  assert.equal(chamadas[1].envelope.payload.nota, '\ufffd');
});

test('1: janela de ±5 min dos dois lados', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const casos = [
    { ts: AGORA - 300, status: 204 },
    { ts: AGORA + 300, status: 204 },
    { ts: AGORA - 301, status: 401 },
    { ts: AGORA + 301, status: 401 },
    { ts: AGORA - 3600, status: 401 },
    { ts: AGORA + 3600, status: 401 },
  ];
  const aceitos = [];
  for (const { ts, status } of casos) {
    const e = umEnvelope();
    // Assinado com o timestamp certo: só a janela recusa.
    assert.equal((await enviar(e, { ts, sequencia: null })).status, status, `ts ${ts - AGORA}`);
    if (status === 204) aceitos.push(e.id);
  }
  assert.deepEqual(ids(), aceitos);
  assert.deepEqual(motivos(receptor), Array(4).fill(MOTIVO.FORA_DA_JANELA));
});

test('1: timestamp ausente ou fora da forma canônica responde 401', async (t) => {
  const { receptor, enviar, porta } = await montar(t);
  const corpo = JSON.stringify(umEnvelope());
  for (const ts of ['', 'agora', `+${AGORA}`, `0${AGORA}`, `${AGORA}.0`, '1e9']) {
    const cabecalhos = { 'X-Geohub-Timestamp': ts, 'X-Geohub-Assinatura': assinar(SEGREDO, ts, corpo) };
    assert.equal((await enviar(corpo, { cabecalhos })).status, 401, JSON.stringify(ts));
  }
  const semTs = cabecalhosDoGeohub(corpo, { segredo: SEGREDO, ts: AGORA, sequencia: 1 });
  delete semTs['X-Geohub-Timestamp'];
  assert.equal((await pedir(porta, { corpo, cabecalhos: semTs })).status, 401);
  assert.ok(motivos(receptor).every((m) => m === MOTIVO.FORA_DA_JANELA));
});

test('1: rotação — só o segredo ANTIGO, com o novo em X-Geohub-Assinatura e o antigo em -Anterior', async (t) => {
  const { enviar, chamadas } = await montar(t, { segredos: [ANTIGO] });
  const e = umEnvelope();
  const r = await enviar(e, { segredo: SEGREDO, anterior: ANTIGO });
  assert.equal(r.status, 204);
  assert.equal(chamadas.length, 1);
});

test('1: rotação — só o segredo NOVO, com o antigo em X-Geohub-Assinatura e o novo em -Anterior', async (t) => {
  const { enviar, chamadas } = await montar(t, { segredos: [SEGREDO] });
  const r = await enviar(umEnvelope(), { segredo: ANTIGO, anterior: SEGREDO });
  assert.equal(r.status, 204);
  assert.equal(chamadas.length, 1);
});

test('1: rotação — os dois segredos configurados, qualquer cabeçalho; nenhum que confira dá 401', async (t) => {
  const { enviar, chamadas, receptor } = await montar(t, { segredos: [SEGREDO, ANTIGO] });
  assert.equal((await enviar(umEnvelope(), { segredo: ANTIGO, sequencia: null })).status, 204);
  assert.equal((await enviar(umEnvelope(), { segredo: SEGREDO, sequencia: null })).status, 204);
  assert.equal((await enviar(umEnvelope(), { segredo: 'x', anterior: ANTIGO, sequencia: null })).status, 204);
  assert.equal((await enviar(umEnvelope(), { segredo: 'x', anterior: 'y', sequencia: null })).status, 401);
  assert.equal(chamadas.length, 3);
  // E o segredo troca em execução: depois de definirSegredos só o novo vale.
  receptor.definirSegredos([SEGREDO]);
  assert.equal((await enviar(umEnvelope(), { segredo: ANTIGO, sequencia: null })).status, 401);
});

test('1: o atalho opcoes.segredo e a assinatura em maiúsculas também valem', async (t) => {
  const { enviar } = await montar(t, { segredos: undefined, segredo: SEGREDO });
  const corpo = JSON.stringify(umEnvelope());
  const c = cabecalhosDoGeohub(corpo, { segredo: SEGREDO, ts: AGORA, sequencia: 1 });
  c['X-Geohub-Assinatura'] = `sha256=${c['X-Geohub-Assinatura'].slice('sha256='.length).toUpperCase()}`;
  assert.match(c['X-Geohub-Assinatura'], /[A-F]/u);
  assert.equal((await enviar(corpo, { cabecalhos: c })).status, 204);
});

test('1: sem segredo configurado, 503 (o Geohub tenta de novo), não 401 (dead letter)', async (t) => {
  const { enviar } = await montar(t, { segredos: [] });
  assert.equal((await enviar(umEnvelope())).status, 503);
  const vazio = await montar(t, { segredos: [''] });
  assert.equal((await vazio.enviar(umEnvelope(), { segredo: '' })).status, 503);
});

// ---- Limite do corpo e método. ----

test('corpo acima do limite responde 413 e não é lido como envelope', async (t) => {
  const { receptor, enviar, porta } = await montar(t);
  const grande = JSON.stringify(umEnvelope({ payload: { texto: 'x'.repeat(LIMITE_DO_CORPO) } }));
  assert.ok(Buffer.byteLength(grande) > LIMITE_DO_CORPO);
  assert.equal((await enviar(grande)).status, 413);
  assert.deepEqual(motivos(receptor), [MOTIVO.CORPO_GRANDE]);
  // No limite exato, passa do tamanho (e aqui para no 401: não é assinado).
  const r = await pedir(porta, { corpo: Buffer.alloc(LIMITE_DO_CORPO, 0x20) });
  assert.equal(r.status, 401);
  assert.ok(LIMITE_DO_CORPO >= 1024 * 1024, 'um payload de 1 MiB cabe');
});

test('só POST: outro método responde 405 com Allow', async (t) => {
  const { porta } = await montar(t);
  const r = await pedir(porta, { metodo: 'GET' });
  assert.equal(r.status, 405);
});

// ---- Obrigação 2: corpo que não é envelope responde 400. ----

test('2: corpo assinado que não é envelope responde 400', async (t) => {
  const { receptor, enviar, chamadas } = await montar(t);
  const sem = (caminho) => {
    const e = umEnvelope();
    const partes = caminho.split('.');
    let alvo = e;
    for (const p of partes.slice(0, -1)) alvo = alvo[p];
    delete alvo[partes.at(-1)];
    return JSON.stringify(e);
  };
  const corpos = {
    'não é JSON': 'isto não é json',
    'JSON cortado': JSON.stringify(umEnvelope()).slice(0, -1),
    vazio: '',
    null: 'null',
    array: '[]',
    número: '42',
    'sem id': sem('id'),
    'sem tipo': sem('tipo'),
    'sem ocorridoEm': sem('ocorridoEm'),
    'sem origem': sem('origem'),
    'sem origem.plugin': sem('origem.plugin'),
    'sem origem.versao': sem('origem.versao'),
    'sem origem.autoria': sem('origem.autoria'),
    'sem origem.autoria.id': sem('origem.autoria.id'),
    'sem origem.autoria.tipo': sem('origem.autoria.tipo'),
    'sem payload': sem('payload'),
    'payload null': JSON.stringify(umEnvelope({ payload: null })),
    'payload array': JSON.stringify(umEnvelope({ payload: [] })),
    'payload texto': JSON.stringify(umEnvelope({ payload: 'x' })),
    'id número': JSON.stringify(umEnvelope({ id: 7 })),
    'ocorridoEm que não é data': JSON.stringify(umEnvelope({ ocorridoEm: 'ontem' })),
  };
  for (const [nome, corpo] of Object.entries(corpos)) {
    assert.equal((await enviar(corpo)).status, 400, nome);
  }
  assert.equal(chamadas.length, 0);
  assert.ok(motivos(receptor).every((m) => m === MOTIVO.ENVELOPE_INVALIDO));
  // Sem solicitacao (evento que nenhum comando causou) é envelope.
  assert.equal((await enviar(sem('origem.solicitacao'))).status, 204);
});

test('2: o corpo inválido sem assinatura é 401, não 400 (a assinatura vem antes)', async (t) => {
  const { enviar } = await montar(t);
  assert.equal((await enviar('isto não é json', { segredo: 'outro' })).status, 401);
});

test('2: ehEnvelope aceita o envelope do guia e do vetor', () => {
  const doVetor = JSON.parse(vetores.casos[0].corpo);
  assert.equal(ehEnvelope(doVetor), true);
  assert.equal(ehEnvelope(umEnvelope()), true);
  assert.equal(ehEnvelope(null), false);
  assert.equal(ehEnvelope(undefined), false);
});

// ---- Obrigação 3: deduplicar pelo id do envelope, 204. ----

test('3: o repetido responde 204 e não é aplicado de novo', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const e = umEnvelope();
  assert.equal((await enviar(e, { sequencia: 1 })).status, 204);
  assert.equal((await enviar(e, { sequencia: 1 })).status, 204);
  // O mesmo id com outros cabeçalhos (não assinados) continua repetido.
  assert.equal((await enviar(e, { sequencia: null })).status, 204);
  assert.equal((await enviar(e, { agregado: 'ocorrencia:outra', sequencia: 1 })).status, 204);
  assert.deepEqual(ids(), [e.id]);
  assert.deepEqual(motivos(receptor), [MOTIVO.REPETIDO, MOTIVO.REPETIDO, MOTIVO.REPETIDO]);
});

test('3: memória limitada — o id mais antigo sai; a sequência ainda pega o repetido', async (t) => {
  const { enviar, ids } = await montar(t, { maxVistos: 2 });
  const [a, b, c] = [umEnvelope(), umEnvelope(), umEnvelope()];
  for (const e of [a, b, c]) assert.equal((await enviar(e, { sequencia: null })).status, 204);
  // Sem sequência, `a` já foi esquecido: é aplicado de novo (o limite é esse).
  assert.equal((await enviar(a, { sequencia: null })).status, 204);
  assert.deepEqual(ids(), [a.id, b.id, c.id, a.id]);

  const { enviar: enviar2, ids: ids2 } = await montar(t, { maxVistos: 1 });
  const [x, y] = [umEnvelope(), umEnvelope()];
  await enviar2(x, { sequencia: 1 });
  await enviar2(y, { sequencia: 2 });
  // `x` saiu dos vistos, mas a sequência 1 já foi aplicada: repetido.
  assert.equal((await enviar2(x, { sequencia: 1 })).status, 204);
  assert.deepEqual(ids2(), [x.id, y.id]);
});

// ---- Obrigação 4: descartar o próprio eco, nunca integracao:*. ----

const autoriaEu = { id: EU, tipo: 'integrador' };
const origemEu = (plugin = 'ocorrencia') => ({ autoria: autoriaEu, plugin, solicitacao: 'sol-1', versao: '1.0.0' });

test('4: o próprio eco responde 204 e não é aplicado', async (t) => {
  const { receptor, enviar, chamadas } = await montar(t);
  const eco = umEnvelope({ origem: origemEu() });
  assert.equal((await enviar(eco, { sequencia: null })).status, 204);
  assert.equal(chamadas.length, 0);
  assert.deepEqual(receptor.descartes(), [{ eventoId: eco.id, motivo: MOTIVO.ECO_PROPRIO }]);
});

test('4: integracao:* com a autoria deste CAD NÃO é eco, e é aplicado', async (t) => {
  const { enviar, ids, receptor } = await montar(t);
  const desfecho = umEnvelope({
    tipo: 'integracao:comando-concluido',
    origem: origemEu('integracao'),
    payload: { comando: 'registrar', resultado: { id: 'oc-9' } },
  });
  assert.equal((await enviar(desfecho, { agregado: 'solicitacao:sol-1', sequencia: 1 })).status, 204);
  assert.deepEqual(ids(), [desfecho.id]);
  assert.deepEqual(receptor.descartes(), []);
});

test('4: não é eco a autoria de outro integrador, de um usuário com o mesmo id, ou do sistema', async (t) => {
  const { enviar, chamadas } = await montar(t);
  const outras = [
    { id: 'cad-2', tipo: 'integrador' },
    { id: EU, tipo: 'usuario' },
    { id: EU, tipo: 'sistema' },
  ];
  for (const autoria of outras) {
    const e = umEnvelope({ origem: { ...umEnvelope().origem, autoria } });
    assert.equal((await enviar(e, { sequencia: null })).status, 204);
  }
  assert.equal(chamadas.length, 3);
});

test('4: o eco consome a sua sequência — os seguintes não ficam presos', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const um = umEnvelope({ tipo: 'ocorrencia:registrada', origem: origemEu(), payload: { id: 'oc-1', natureza: 'incendio', status: 'aberta' } });
  const dois = umEnvelope();
  const tres = umEnvelope({ origem: origemEu() });
  const quatro = umEnvelope();
  // O eco 3 chega adiantado e espera; quando a vez dele chega, é pulado.
  assert.equal((await enviar(tres, { sequencia: 3 })).status, 204);
  assert.equal((await enviar(um, { sequencia: 1 })).status, 204);
  assert.equal((await enviar(dois, { sequencia: 2 })).status, 204);
  assert.equal((await enviar(quatro, { sequencia: 4 })).status, 204);
  assert.deepEqual(ids(), [dois.id, quatro.id]);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 0);
  assert.deepEqual(motivos(receptor), [MOTIVO.ECO_PROPRIO, MOTIVO.ECO_PROPRIO]);
});

test('4: sem integradorId nada é eco', async (t) => {
  const { enviar, chamadas } = await montar(t, { integradorId: undefined });
  assert.equal((await enviar(umEnvelope({ origem: origemEu() }), { sequencia: null })).status, 204);
  assert.equal(chamadas.length, 1);
});

// ---- Teste e verificação (guia 12.6): 204, descartados, pelo tipo exato. ----

const teste = (tipo = 'integracao:teste', mudar = {}) =>
  umEnvelope({
    tipo,
    origem: { autoria: { id: 'geohub', tipo: 'sistema' }, plugin: 'geohub', versao: '1.0.0' },
    payload: { mensagem: 'ping' },
    ...mudar,
  });

test('12.6: integracao:teste e integracao:verificacao respondem 204 e não são aplicados (motivo teste)', async (t) => {
  const { receptor, enviar, chamadas } = await montar(t);
  assert.deepEqual([...TIPOS_DE_TESTE].sort(), ['integracao:teste', 'integracao:verificacao']);
  const [t1, v1] = [teste('integracao:teste'), teste('integracao:verificacao')];
  assert.equal((await enviar(t1, { agregado: 'teste:1', sequencia: 1 })).status, 204);
  assert.equal((await enviar(v1, { agregado: null, sequencia: null })).status, 204);
  // Repetidos continuam repetidos.
  assert.equal((await enviar(t1, { agregado: 'teste:1', sequencia: 1 })).status, 204);
  assert.equal((await enviar(v1, { agregado: null, sequencia: null })).status, 204);
  assert.equal(chamadas.length, 0);
  assert.deepEqual(receptor.aplicados(), []);
  assert.deepEqual(receptor.descartes(), [
    { eventoId: t1.id, motivo: MOTIVO.TESTE },
    { eventoId: v1.id, motivo: MOTIVO.TESTE },
    { eventoId: t1.id, motivo: MOTIVO.REPETIDO },
    { eventoId: v1.id, motivo: MOTIVO.REPETIDO },
  ]);
});

test('12.6: o evento de teste pedido pelo próprio CAD é teste, não eco', async (t) => {
  const { receptor, enviar, chamadas } = await montar(t);
  const meu = teste('integracao:teste', { origem: { autoria: autoriaEu, plugin: 'geohub', versao: '1.0.0' } });
  assert.equal((await enviar(meu, { agregado: 'teste:2', sequencia: 1 })).status, 204);
  assert.equal(chamadas.length, 0);
  assert.deepEqual(motivos(receptor), [MOTIVO.TESTE]);
});

test('12.6: só depois da assinatura e do envelope — teste mal assinado é 401, teste sem payload é 400', async (t) => {
  const { receptor, enviar } = await montar(t);
  assert.equal((await enviar(teste(), { segredo: 'outro' })).status, 401);
  assert.equal((await enviar(JSON.stringify({ ...teste(), payload: null }))).status, 400);
  assert.deepEqual(motivos(receptor), [MOTIVO.ASSINATURA_INVALIDA, MOTIVO.ENVELOPE_INVALIDO]);
});

test('12.6: pelo tipo exato — nem o agregado teste:, nem a origem, nem integracao:* em bloco', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const aplicaveis = [
    // Um produtor pode publicar em teste:x; o agregado não é reservado.
    [umEnvelope({ tipo: 'jornada:iniciada' }), 'teste:x'],
    [umEnvelope({ origem: { ...teste().origem } }), 'ocorrencia:oc-9'],
    [teste('integracao:teste-de-carga'), 'teste:y'],
    [teste('Integracao:Teste'), 'teste:z'],
    [umEnvelope({ tipo: 'integracao:comando-concluido', payload: { comando: 'registrar' } }), 'solicitacao:s-1'],
  ];
  for (const [e, agregado] of aplicaveis) assert.equal((await enviar(e, { agregado, sequencia: 1 })).status, 204);
  assert.deepEqual(ids(), aplicaveis.map(([e]) => e.id));
  assert.deepEqual(receptor.descartes(), []);
});

test('12.6: o teste ocupa a sua sequência, também retido — os seguintes não ficam presos', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const [e1, e2, e3, e4] = [umEnvelope(), teste('integracao:verificacao'), teste(), umEnvelope()];
  assert.equal((await enviar(e4, { sequencia: 4 })).status, 204);
  assert.equal((await enviar(e3, { sequencia: 3 })).status, 204); // retido, é teste
  assert.equal((await enviar(e2, { sequencia: 2 })).status, 204); // retido, é verificação
  assert.deepEqual(ids(), []);
  assert.equal((await enviar(e1, { sequencia: 1 })).status, 204);
  assert.deepEqual(ids(), [e1.id, e4.id]);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 0);
  assert.deepEqual(receptor.descartes(), [
    { eventoId: e2.id, motivo: MOTIVO.TESTE },
    { eventoId: e3.id, motivo: MOTIVO.TESTE },
  ]);
  assert.equal(await receptor.proximaDe('ocorrencia:oc-1'), 5);
});

// ---- Obrigação 5: ordem de X-Geohub-Sequencia dentro do agregado. ----

test('5: fora de ordem — os adiantados esperam e drenam em ordem, a partir da linha de base 0', async (t) => {
  const { receptor, enviar, ids, chamadas } = await montar(t);
  const [e1, e2, e3] = [umEnvelope(), umEnvelope(), umEnvelope()];
  assert.equal((await enviar(e3, { sequencia: 3 })).status, 204);
  assert.equal((await enviar(e2, { sequencia: 2 })).status, 204);
  assert.deepEqual(ids(), []);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 2);
  assert.equal(receptor.totalEmEspera(), 2);
  assert.equal((await enviar(e1, { sequencia: 1 })).status, 204);
  assert.deepEqual(ids(), [e1.id, e2.id, e3.id]);
  assert.deepEqual(chamadas.map((c) => c.entrega.sequencia), [1, 2, 3]);
  assert.ok(chamadas.every((c) => c.entrega.agregado === 'ocorrencia:oc-1'));
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 0);
  assert.deepEqual(receptor.aplicados().map((a) => [a.id, a.sequencia]), [[e1.id, 1], [e2.id, 2], [e3.id, 3]]);
});

test('5: a primeira chegada sendo a 3 espera (não vira linha de base)', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const e3 = umEnvelope();
  assert.equal((await enviar(e3, { sequencia: 3 })).status, 204);
  assert.deepEqual(ids(), []);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 1);
  // Chega a 1: aplica; a 3 continua esperando a 2.
  const e1 = umEnvelope();
  await enviar(e1, { sequencia: 1 });
  assert.deepEqual(ids(), [e1.id]);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 1);
});

test('5: buraco no meio — 1, 3, 5 chegam; 2 e 4 fecham os buracos', async (t) => {
  const { enviar, ids } = await montar(t);
  const e = [null, umEnvelope(), umEnvelope(), umEnvelope(), umEnvelope(), umEnvelope()];
  for (const s of [1, 3, 5]) await enviar(e[s], { sequencia: s });
  assert.deepEqual(ids(), [e[1].id]);
  await enviar(e[2], { sequencia: 2 });
  assert.deepEqual(ids(), [e[1].id, e[2].id, e[3].id]);
  await enviar(e[4], { sequencia: 4 });
  assert.deepEqual(ids(), [1, 2, 3, 4, 5].map((s) => e[s].id));
});

test('5: sequência repetida (≤ última aplicada, ou já na espera) não é aplicada de novo', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const [e1, e2] = [umEnvelope(), umEnvelope()];
  await enviar(e1, { sequencia: 1 });
  await enviar(e2, { sequencia: 2 });
  // Outro id com uma sequência já aplicada: repetido (cabeçalho adulterado).
  assert.equal((await enviar(umEnvelope(), { sequencia: 1 })).status, 204);
  assert.equal((await enviar(umEnvelope(), { sequencia: 2 })).status, 204);
  // E a 4 esperando: outra "4" é repetida.
  await enviar(umEnvelope(), { sequencia: 4 });
  assert.equal((await enviar(umEnvelope(), { sequencia: 4 })).status, 204);
  assert.deepEqual(ids(), [e1.id, e2.id]);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 1);
  assert.deepEqual(motivos(receptor), [MOTIVO.REPETIDO, MOTIVO.REPETIDO, MOTIVO.REPETIDO]);
});

test('5: sequência ausente ou ilegível aplica na hora, também com adiantados esperando', async (t) => {
  const { receptor, enviar, ids, chamadas } = await montar(t);
  await enviar(umEnvelope(), { sequencia: 5 }); // espera
  const sem = umEnvelope();
  const ilegiveis = ['abc', '0', '-1', '2.5', '1e3', '99999999999999999999'].map((s) => [umEnvelope(), s]);
  assert.equal((await enviar(sem, { sequencia: null })).status, 204);
  for (const [e, s] of ilegiveis) {
    assert.equal((await enviar(e, { cabecalhos: { 'X-Geohub-Sequencia': s } })).status, 204, s);
  }
  assert.deepEqual(ids(), [sem.id, ...ilegiveis.map(([e]) => e.id)]);
  assert.equal(chamadas[0].entrega.sequencia, null);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 1);
});

test('5: sem X-Geohub-Agregado, o agregado é o próprio envelope e aplica na hora', async (t) => {
  const { enviar, chamadas } = await montar(t);
  const e = umEnvelope();
  assert.equal((await enviar(e, { agregado: null, sequencia: 7 })).status, 204);
  assert.equal(chamadas.length, 1);
  assert.equal(chamadas[0].entrega.agregado, e.id);
});

test('5: agregados diferentes não esperam um pelo outro', async (t) => {
  const { receptor, enviar, ids } = await montar(t);
  const [a2, b1] = [umEnvelope(), umEnvelope()];
  await enviar(a2, { agregado: 'ocorrencia:a', sequencia: 2 });
  await enviar(b1, { agregado: 'ocorrencia:b', sequencia: 1 });
  assert.deepEqual(ids(), [b1.id]);
  assert.equal(receptor.emEspera('ocorrencia:a'), 1);
  assert.equal(receptor.emEspera('ocorrencia:b'), 0);
});

test('5: espera cheia responde 503 (o Geohub reenvia depois)', async (t) => {
  const { receptor, enviar } = await montar(t, { maxEsperaPorAgregado: 2 });
  assert.equal((await enviar(umEnvelope(), { sequencia: 2 })).status, 204);
  assert.equal((await enviar(umEnvelope(), { sequencia: 3 })).status, 204);
  const quarto = umEnvelope();
  assert.equal((await enviar(quarto, { sequencia: 4 })).status, 503);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 2);
  assert.equal(receptor.descartes().at(-1).motivo, MOTIVO.ESPERA_CHEIA);
});

test('5: pedidos simultâneos do mesmo agregado — aoAplicar um de cada vez, em ordem', async (t) => {
  let ativos = 0;
  let maximo = 0;
  const ordem = [];
  const { enviar } = await montar(t, {
    aoAplicar: async (envelope, entrega) => {
      ativos += 1;
      maximo = Math.max(maximo, ativos);
      await new Promise((r) => setTimeout(r, 5));
      ordem.push(entrega.sequencia);
      ativos -= 1;
    },
  });
  const envelopes = Array.from({ length: 8 }, () => umEnvelope());
  const respostas = await Promise.all(envelopes.map((e, i) => enviar(e, { sequencia: 8 - i })));
  assert.ok(respostas.every((r) => r.status === 204));
  assert.deepEqual(ordem, [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.equal(maximo, 1);
});

test('5: aoAplicar que falha responde 500, não avança, e o reenvio aplica (e drena)', async (t) => {
  let falhar = true;
  const aplicados = [];
  const { receptor, enviar } = await montar(t, {
    aoAplicar: (envelope, entrega) => {
      if (falhar && entrega.sequencia === 1) throw new Error('banco fora');
      aplicados.push(entrega.sequencia);
    },
  });
  const [e1, e2] = [umEnvelope(), umEnvelope()];
  assert.equal((await enviar(e1, { sequencia: 1 })).status, 500);
  assert.equal((await enviar(e2, { sequencia: 2 })).status, 204); // espera a 1
  assert.deepEqual(aplicados, []);
  falhar = false;
  assert.equal((await enviar(e1, { sequencia: 1 })).status, 204); // o reenvio do Geohub
  assert.deepEqual(aplicados, [1, 2]);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 0);
  assert.equal(receptor.descartes()[0].motivo, MOTIVO.FALHA_AO_APLICAR);
});

test('5: adiantado cujo aoAplicar falha na drenagem fica na frente e drenarTudo tenta de novo', async (t) => {
  let falhar = true;
  const aplicados = [];
  const { receptor, enviar } = await montar(t, {
    aoAplicar: (envelope, entrega) => {
      if (falhar && entrega.sequencia === 2) throw new Error('banco fora');
      aplicados.push(entrega.sequencia);
    },
  });
  await enviar(umEnvelope(), { sequencia: 2 });
  await enviar(umEnvelope(), { sequencia: 3 });
  assert.equal((await enviar(umEnvelope(), { sequencia: 1 })).status, 204);
  assert.deepEqual(aplicados, [1]);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 2);
  await assert.rejects(receptor.drenarTudo(), AggregateError);
  falhar = false;
  await receptor.drenarTudo();
  assert.deepEqual(aplicados, [1, 2, 3]);
  assert.equal(receptor.emEspera('ocorrencia:oc-1'), 0);
});

// ---- Estado por despacho (a projeção) e o gancho aoAplicar. ----

test('estado por despacho: despachada cria, despacho-mudou-status move UM, mudou-status move a ocorrência', async (t) => {
  const { receptor, enviar, chamadas } = await montar(t);
  const ag = { agregado: 'ocorrencia:oc-1' };
  const seq = [
    umEnvelope({ tipo: 'ocorrencia:registrada', payload: { id: 'oc-1', natureza: 'incendio', status: 'aberta' } }),
    umEnvelope({ tipo: 'ocorrencia:despachada', payload: { despacho: { id: 'd-1', ocorrenciaId: 'oc-1', recurso: { identificador: 'UR-12' }, status: 'em_deslocamento' } } }),
    umEnvelope({ tipo: 'ocorrencia:despachada', payload: { despacho: { id: 'd-2', ocorrenciaId: 'oc-1', recurso: { identificador: 'ABT-3' }, status: 'em_deslocamento' } } }),
    umEnvelope({ tipo: 'ocorrencia:despacho-mudou-status', payload: { id: 'd-1', ocorrenciaId: 'oc-1', de: 'em_deslocamento', para: 'no_local' } }),
    umEnvelope({ tipo: 'ocorrencia:mudou-status', payload: { id: 'oc-1', de: 'aberta', para: 'em_atendimento' } }),
  ];
  assert.equal(receptor.ocorrencia('oc-1'), undefined);
  await enviar(seq[0], { ...ag, sequencia: 1 });
  assert.equal(receptor.ocorrencia('oc-1'), 'aberta');
  for (let i = 1; i < seq.length; i++) await enviar(seq[i], { ...ag, sequencia: i + 1 });
  assert.deepEqual(receptor.despacho('d-1'), { despachoId: 'd-1', ocorrenciaId: 'oc-1', recurso: 'UR-12', status: 'no_local' });
  assert.deepEqual(receptor.despacho('d-2'), { despachoId: 'd-2', ocorrenciaId: 'oc-1', recurso: 'ABT-3', status: 'em_deslocamento' });
  assert.equal(receptor.ocorrencia('oc-1'), 'em_atendimento');
  assert.equal(receptor.despacho('d-3'), undefined);
  assert.equal(receptor.despachos().length, 2);
  // O gancho recebe cada envelope, com a entrega.
  assert.deepEqual(chamadas.map((c) => c.envelope.tipo), seq.map((e) => e.tipo));
  assert.deepEqual(Object.keys(chamadas[0].entrega).sort(), ['agregado', 'entregaId', 'sequencia', 'tentativa']);
  assert.equal(chamadas[0].entrega.tentativa, 1);
  // Mudar o que despacho() devolveu não muda a projeção.
  receptor.despacho('d-1').status = 'outro';
  assert.equal(receptor.despacho('d-1').status, 'no_local');
});

test('payload estranho num tipo conhecido não derruba o receptor', async (t) => {
  const { enviar, receptor } = await montar(t);
  const estranhos = [
    umEnvelope({ tipo: 'ocorrencia:despachada', payload: { despacho: null } }),
    umEnvelope({ tipo: 'ocorrencia:despachada', payload: {} }),
    umEnvelope({ tipo: 'ocorrencia:despacho-mudou-status', payload: {} }),
    umEnvelope({ tipo: 'ocorrencia:mudou-status', payload: { id: 5 } }),
  ];
  for (const e of estranhos) assert.equal((await enviar(e, { sequencia: null })).status, 204);
  assert.equal(receptor.despachos().length, 0);
});

test('aoDescartar é avisado de cada descarte, e uma falha dele não muda a resposta', async (t) => {
  const avisos = [];
  const { enviar } = await montar(t, {
    aoDescartar: (d) => {
      avisos.push(d);
      throw new Error('aviso quebrado');
    },
  });
  const e = umEnvelope();
  assert.equal((await enviar(e, { sequencia: null })).status, 204);
  assert.equal((await enviar(e, { sequencia: null })).status, 204);
  assert.equal((await enviar(e, { segredo: 'outro', eventoId: 'do-cabecalho' })).status, 401);
  assert.deepEqual(avisos, [
    { eventoId: e.id, motivo: MOTIVO.REPETIDO },
    { eventoId: 'do-cabecalho', motivo: MOTIVO.ASSINATURA_INVALIDA },
  ]);
});

test('aplicados e descartes guardam só os últimos maxHistorico', async (t) => {
  const { enviar, receptor, chamadas } = await montar(t, { maxHistorico: 2 });
  const es = [umEnvelope(), umEnvelope(), umEnvelope()];
  for (const e of es) await enviar(e, { sequencia: null });
  assert.equal(chamadas.length, 3);
  assert.deepEqual(receptor.aplicados().map((a) => a.id), [es[1].id, es[2].id]);
});

// ---- Estado durável: reinício com os ganchos sequencias, vistos e retidos. ----

/**
 * Um banco de mentira: Maps atrás de funções assíncronas (cada uma espera
 * uma volta do laço, como uma consulta de verdade). `falhas.<gancho>` com
 * um erro faz aquele gancho rejeitar; `lancar.<gancho>` faz lançar na hora
 * (um gancho síncrono que falha). Os retidos passam por JSON, como numa
 * coluna do banco.
 */
function umBanco() {
  const proximas = new Map();
  const vistos = new Set();
  const retidos = new Map(); // agregado -> Map(sequência -> JSON)
  const chamadas = [];
  const falhas = {};
  const lancar = {};
  const volta = () => new Promise((r) => setImmediate(r));
  const chamar = async (nome, args, fazer) => {
    if (lancar[nome]) throw lancar[nome];
    await volta();
    chamadas.push([nome, ...args]);
    if (falhas[nome]) throw falhas[nome];
    return fazer();
  };
  // Sem `lancar`, cada gancho devolve a Promise sem lançar antes.
  const gancho = (nome, fazer) => (...args) => {
    if (lancar[nome]) throw lancar[nome];
    return chamar(nome, args, () => fazer(...args));
  };
  return {
    proximas,
    vistos,
    retidos,
    chamadas,
    falhas,
    lancar,
    contar: (nome) => chamadas.filter((c) => c[0] === nome).length,
    opcoes: {
      sequencias: {
        proxima: gancho('proxima', (agregado) => proximas.get(agregado)),
        definirProxima: gancho('definirProxima', (agregado, n) => {
          proximas.set(agregado, Math.max(proximas.get(agregado) ?? 1, n));
        }),
      },
      vistos: {
        tem: gancho('tem', (id) => vistos.has(id)),
        marcar: gancho('marcar', (id) => {
          vistos.add(id);
        }),
      },
      retidos: {
        carregar: gancho('carregar', (agregado) => [...(retidos.get(agregado)?.values() ?? [])].map((j) => JSON.parse(j))),
        guardar: gancho('guardar', (agregado, sequencia, retido) => {
          if (!retidos.has(agregado)) retidos.set(agregado, new Map());
          retidos.get(agregado).set(sequencia, JSON.stringify(retido));
        }),
        remover: gancho('remover', (agregado, sequencia) => {
          retidos.get(agregado)?.delete(sequencia);
        }),
      },
    },
  };
}

const AG = 'ocorrencia:oc-1';

test('reinício: sem estado durável, o receptor novo espera de novo pela 1 (o comportamento antigo)', async (t) => {
  const antes = await montar(t);
  for (const s of [1, 2, 3]) assert.equal((await antes.enviar(umEnvelope(), { sequencia: s })).status, 204);
  assert.equal(antes.chamadas.length, 3);
  const depois = await montar(t);
  assert.equal((await depois.enviar(umEnvelope(), { sequencia: 4 })).status, 204);
  assert.equal(depois.chamadas.length, 0);
  assert.equal(depois.receptor.emEspera(AG), 1);
  assert.equal(await depois.receptor.proximaDe(AG), 1);
});

test('reinício: com sequencias, o receptor novo continua da próxima sequência, e o já aplicado é repetido', async (t) => {
  const banco = umBanco();
  const { sequencias } = banco.opcoes;
  const antes = await montar(t, { sequencias });
  const es = [null, umEnvelope(), umEnvelope(), umEnvelope(), umEnvelope(), umEnvelope()];
  for (const s of [1, 2, 3]) assert.equal((await antes.enviar(es[s], { sequencia: s })).status, 204);
  assert.deepEqual(banco.proximas, new Map([[AG, 4]]));

  const depois = await montar(t, { sequencias });
  assert.equal((await depois.enviar(es[4], { sequencia: 4 })).status, 204);
  assert.deepEqual(depois.ids(), [es[4].id], 'a 4 foi aplicada na hora, não retida');
  assert.equal(depois.receptor.emEspera(AG), 0);
  // O Geohub manda de novo uma que o CAD antigo aplicou: repetida pela sequência.
  assert.equal((await depois.enviar(es[2], { sequencia: 2 })).status, 204);
  assert.equal((await depois.enviar(es[5], { sequencia: 5 })).status, 204);
  assert.deepEqual(depois.ids(), [es[4].id, es[5].id]);
  assert.deepEqual(motivos(depois.receptor), [MOTIVO.REPETIDO]);
  assert.equal(banco.proximas.get(AG), 6);
  // Consultado uma vez por agregado no processo: a primeira entrega.
  assert.equal(banco.contar('proxima'), 2, 'uma vez em cada receptor');
  assert.deepEqual(banco.chamadas.filter((c) => c[0] === 'definirProxima').map((c) => c[2]), [2, 3, 4, 5, 6]);
});

test('reinício: o eco e o teste pulados também avançam a sequência guardada', async (t) => {
  const banco = umBanco();
  const antes = await montar(t, banco.opcoes);
  await antes.enviar(umEnvelope(), { sequencia: 1 });
  await antes.enviar(umEnvelope({ origem: origemEu() }), { sequencia: 2 }); // eco
  await antes.enviar(teste(), { sequencia: 3 });
  assert.equal(antes.chamadas.length, 1);
  assert.equal(banco.proximas.get(AG), 4);
  const depois = await montar(t, banco.opcoes);
  const e4 = umEnvelope();
  await depois.enviar(e4, { sequencia: 4 });
  assert.deepEqual(depois.ids(), [e4.id]);
});

test('reinício: com vistos, um id aplicado antes do reinício é repetido também sem sequência', async (t) => {
  const banco = umBanco();
  const antes = await montar(t, { vistos: banco.opcoes.vistos });
  const e = umEnvelope();
  assert.equal((await antes.enviar(e, { sequencia: null })).status, 204);
  const depois = await montar(t, { vistos: banco.opcoes.vistos });
  assert.equal((await depois.enviar(e, { sequencia: null })).status, 204);
  assert.equal(depois.chamadas.length, 0);
  assert.deepEqual(motivos(depois.receptor), [MOTIVO.REPETIDO]);
  // Um retido não é marcado em vistos (só o aplicado ou pulado): se o
  // processo cair com ele retido, o reenvio do reparo de lacuna o aplica.
  const adiantado = umEnvelope();
  await depois.enviar(adiantado, { sequencia: 2 });
  assert.equal(banco.vistos.has(adiantado.id), false);
  // Mas, enquanto retido, um repetido dele é repetido.
  assert.equal((await depois.enviar(adiantado, { sequencia: null })).status, 204);
  assert.equal(depois.chamadas.length, 0);
});

test('reinício: com retidos, o adiantado retido antes do reinício é aplicado quando o buraco fecha', async (t) => {
  const banco = umBanco();
  const antes = await montar(t, banco.opcoes);
  const [e1, e2, e3, e4] = [umEnvelope(), umEnvelope(), umEnvelope({ origem: origemEu() }), umEnvelope()];
  await antes.enviar(e1, { sequencia: 1 });
  assert.equal((await antes.enviar(e4, { sequencia: 4 })).status, 204);
  assert.equal((await antes.enviar(e3, { sequencia: 3 })).status, 204); // eco, retido
  assert.deepEqual([...banco.retidos.get(AG).keys()].sort(), [3, 4]);

  const depois = await montar(t, banco.opcoes);
  assert.equal((await depois.enviar(e2, { sequencia: 2 })).status, 204);
  assert.deepEqual(depois.ids(), [e2.id, e4.id]);
  assert.deepEqual(depois.chamadas.map((c) => c.entrega.sequencia), [2, 4]);
  assert.equal(depois.chamadas[1].entrega.agregado, AG);
  assert.deepEqual(motivos(depois.receptor), [MOTIVO.ECO_PROPRIO]);
  assert.equal(banco.retidos.get(AG).size, 0, 'removidos do banco depois de aplicados');
  assert.equal(banco.proximas.get(AG), 5);
  assert.equal(depois.receptor.emEspera(AG), 0);
});

test('reinício: um retido que ficou no banco abaixo da próxima é jogado fora ao carregar', async (t) => {
  const banco = umBanco();
  banco.proximas.set(AG, 5);
  banco.retidos.set(AG, new Map([[3, JSON.stringify({ envelope: umEnvelope(), entrega: { agregado: AG, sequencia: 3 } })]]));
  const { enviar, ids, receptor } = await montar(t, banco.opcoes);
  const e5 = umEnvelope();
  await enviar(e5, { sequencia: 5 });
  assert.deepEqual(ids(), [e5.id]);
  assert.equal(banco.retidos.get(AG).size, 0);
  assert.equal(receptor.emEspera(AG), 0);
});

test('a prática recomendada: a sequência gravada na transação da projeção, dentro de aoAplicar', async (t) => {
  // O banco do CAD: a projeção e a próxima sequência mudam juntas.
  const projecao = new Map();
  const proximas = new Map();
  const sequencias = {
    proxima: async (agregado) => proximas.get(agregado),
    definirProxima: async (agregado, n) => {
      // Para o eco e o teste, que não passam por aoAplicar; para os outros,
      // gravar de novo o que a transação já gravou não muda nada.
      proximas.set(agregado, Math.max(proximas.get(agregado) ?? 1, n));
    },
  };
  let cair = false;
  const aoAplicar = async (envelope, entrega) => {
    // BEGIN … COMMIT
    projecao.set(envelope.payload.id, envelope.payload.para);
    if (entrega.sequencia !== null) proximas.set(entrega.agregado, entrega.sequencia + 1);
    if (cair) throw new Error('o processo caiu depois do COMMIT');
  };
  const antes = await montar(t, { sequencias, aoAplicar });
  const e1 = umEnvelope();
  const e2 = umEnvelope({ payload: { id: 'oc-1', de: 'em_atendimento', para: 'encerrada' } });
  await antes.enviar(e1, { sequencia: 1 });
  cair = true;
  assert.equal((await antes.enviar(e2, { sequencia: 2 })).status, 500);
  cair = false;
  // Reiniciado: o reenvio da 2 é repetido, porque a sequência foi com a projeção.
  const aplicados = [];
  const depois = await montar(t, { sequencias, aoAplicar: (e, entrega) => { aplicados.push(entrega.sequencia); return aoAplicar(e, entrega); } });
  assert.equal((await depois.enviar(e2, { sequencia: 2 })).status, 204);
  assert.deepEqual(aplicados, []);
  assert.deepEqual(motivos(depois.receptor), [MOTIVO.REPETIDO]);
  assert.equal(projecao.get('oc-1'), 'encerrada');
});

test('proxima é consultado na vez do agregado: entregas simultâneas esperam a leitura e saem em ordem', async (t) => {
  const banco = umBanco();
  banco.proximas.set(AG, 3);
  let soltar;
  const lida = new Promise((r) => {
    soltar = r;
  });
  const sequencias = {
    proxima: async (agregado) => {
      await lida;
      return banco.opcoes.sequencias.proxima(agregado);
    },
    definirProxima: banco.opcoes.sequencias.definirProxima,
  };
  const ordem = [];
  const { enviar } = await montar(t, { sequencias, aoAplicar: (e, entrega) => { ordem.push(entrega.sequencia); } });
  const respostas = Promise.all([5, 4, 3, 2].map((s) => enviar(umEnvelope(), { sequencia: s })));
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(ordem, []);
  soltar();
  assert.deepEqual((await respostas).map((r) => r.status), [204, 204, 204, 204]);
  assert.deepEqual(ordem, [3, 4, 5]);
  assert.equal(banco.contar('proxima'), 1);
  assert.equal(banco.proximas.get(AG), 6);
});

test('proxima aceita texto (BIGINT do pg) e bigint; um valor inválido é 503', async (t) => {
  for (const [valor, aplica] of [['7', true], [7n, true], [null, false], ['abc', 'erro'], [0, 'erro'], [1.5, 'erro']]) {
    const { enviar, chamadas, receptor } = await montar(t, {
      sequencias: { proxima: async () => valor, definirProxima: async () => {} },
    });
    const r = await enviar(umEnvelope(), { sequencia: 7 });
    if (aplica === 'erro') {
      assert.equal(r.status, 503, String(valor));
      assert.deepEqual(motivos(receptor), [MOTIVO.ESTADO_INDISPONIVEL]);
    } else {
      assert.equal(r.status, 204, String(valor));
      assert.equal(chamadas.length, aplica ? 1 : 0, String(valor));
    }
  }
});

for (const modo of ['rejeita', 'lança']) {
  test(`um gancho que ${modo} responde 503 (estado-indisponivel), nunca 204, e o reenvio aplica`, async (t) => {
    for (const gancho of ['proxima', 'tem', 'definirProxima', 'marcar', 'guardar', 'carregar']) {
      const banco = umBanco();
      const { enviar, ids, receptor } = await montar(t, banco.opcoes);
      const falhar = () => {
        (modo === 'rejeita' ? banco.falhas : banco.lancar)[gancho] = new Error(`${gancho} fora do ar`);
      };
      const voltar = () => {
        delete banco.falhas[gancho];
        delete banco.lancar[gancho];
      };
      const [e1, e2] = [umEnvelope(), umEnvelope()];
      // guardar só é chamado para um adiantado.
      const primeira = gancho === 'guardar' ? [e2, 2] : [e1, 1];
      falhar();
      const r = await enviar(primeira[0], { sequencia: primeira[1] });
      assert.equal(r.status, 503, `${gancho}: ${r.status}`);
      assert.equal(receptor.descartes().at(-1).motivo, MOTIVO.ESTADO_INDISPONIVEL, gancho);
      assert.equal(receptor.emEspera(AG), 0, `${gancho}: nada retido`);
      voltar();
      // O Geohub manda de novo: aplica (uma vez só, mesmo que aoAplicar já
      // tenha rodado, quando a falha veio depois e a sequência foi gravada).
      assert.equal((await enviar(primeira[0], { sequencia: primeira[1] })).status, 204, gancho);
      if (gancho === 'guardar') {
        assert.equal(receptor.emEspera(AG), 1);
        assert.equal((await enviar(e1, { sequencia: 1 })).status, 204);
      } else {
        assert.equal((await enviar(e2, { sequencia: 2 })).status, 204);
      }
      const esperado = gancho === 'definirProxima' ? [e1.id, e1.id, e2.id] : [e1.id, e2.id];
      assert.deepEqual(ids(), esperado, gancho);
      assert.equal(banco.proximas.get(AG), 3, gancho);
    }
  });
}

test('um gancho que falha sem ordem (sem sequência) também responde 503', async (t) => {
  const banco = umBanco();
  const { enviar, ids } = await montar(t, banco.opcoes);
  const e = umEnvelope();
  banco.falhas.tem = new Error('fora');
  assert.equal((await enviar(e, { sequencia: null })).status, 503);
  delete banco.falhas.tem;
  banco.falhas.marcar = new Error('fora');
  assert.equal((await enviar(e, { sequencia: null })).status, 503);
  delete banco.falhas.marcar;
  // Sem a marca, o reenvio aplica de novo: ao menos uma vez (por isso a
  // marca vai na transação da projeção).
  assert.equal((await enviar(e, { sequencia: null })).status, 204);
  assert.equal((await enviar(e, { sequencia: null })).status, 204);
  assert.deepEqual(ids(), [e.id, e.id]);
});

test('um gancho que falha na drenagem deixa o retido na frente; drenarTudo tenta de novo', async (t) => {
  const banco = umBanco();
  const { enviar, ids, receptor } = await montar(t, banco.opcoes);
  const [e1, e2, e3] = [umEnvelope(), umEnvelope(), umEnvelope()];
  await enviar(e3, { sequencia: 3 });
  await enviar(e2, { sequencia: 2 });
  banco.falhas.marcar = new Error('fora');
  // A 1 mesma falha em marcar: 503 (a sequência já foi gravada).
  assert.equal((await enviar(e1, { sequencia: 1 })).status, 503);
  delete banco.falhas.marcar;
  await receptor.drenarTudo();
  assert.deepEqual(ids(), [e1.id, e2.id, e3.id]);
  assert.equal(receptor.emEspera(AG), 0);
  assert.equal(banco.proximas.get(AG), 4);
});

test('ajustarProxima: o passo 6 do reparo — pula o expurgado e aplica os retidos a partir dali', async (t) => {
  const banco = umBanco();
  const { enviar, ids, receptor } = await montar(t, banco.opcoes);
  const [e5, e6] = [umEnvelope(), umEnvelope()];
  await enviar(e5, { sequencia: 5 });
  await enviar(e6, { sequencia: 6 });
  await enviar(umEnvelope(), { sequencia: 3 }); // abaixo do ponto escolhido: esquecido
  assert.equal(receptor.emEspera(AG), 3);
  await receptor.ajustarProxima(AG, 5);
  assert.deepEqual(ids(), [e5.id, e6.id]);
  assert.equal(receptor.emEspera(AG), 0);
  assert.equal(banco.proximas.get(AG), 7);
  assert.equal(banco.retidos.get(AG).size, 0);
  await assert.rejects(receptor.ajustarProxima(AG, 2), RangeError);
  await assert.rejects(receptor.ajustarProxima(AG, 0), RangeError);
  // Sem ganchos também.
  const semBanco = await montar(t);
  const e2 = umEnvelope();
  await semBanco.enviar(e2, { sequencia: 2 });
  await semBanco.receptor.ajustarProxima(AG, 2);
  assert.deepEqual(semBanco.ids(), [e2.id]);
  assert.equal(await semBanco.receptor.proximaDe(AG), 3);
});

test('com sequencias, a memória guarda só maxAgregadosEmMemoria agregados e relê os esquecidos', async (t) => {
  const banco = umBanco();
  const { enviar, ids } = await montar(t, { sequencias: banco.opcoes.sequencias, maxAgregadosEmMemoria: 1 });
  const [a1, b1, a2, a1deNovo] = [umEnvelope(), umEnvelope(), umEnvelope(), null];
  await enviar(a1, { agregado: 'ocorrencia:a', sequencia: 1 });
  await enviar(b1, { agregado: 'ocorrencia:b', sequencia: 1 });
  await enviar(a2, { agregado: 'ocorrencia:a', sequencia: 2 });
  assert.equal(a1deNovo, null);
  assert.equal((await enviar(a1, { agregado: 'ocorrencia:a', sequencia: 1 })).status, 204);
  assert.deepEqual(ids(), [a1.id, b1.id, a2.id]);
  assert.equal(banco.contar('proxima'), 3, 'a, b, e a de novo depois de esquecido');
  // Um agregado com retidos não é esquecido.
  const c3 = umEnvelope();
  await enviar(c3, { agregado: 'ocorrencia:c', sequencia: 3 });
  await enviar(umEnvelope(), { agregado: 'ocorrencia:d', sequencia: 1 });
  const antes = banco.contar('proxima');
  await enviar(umEnvelope(), { agregado: 'ocorrencia:c', sequencia: 1 });
  assert.equal(banco.contar('proxima'), antes, 'c ficou em memória');
});

test('um gancho sem as funções pedidas é recusado na construção', () => {
  assert.throws(() => new Receptor({ segredo: 's', sequencias: { proxima() {} } }), /sequencias precisa de proxima\(\), definirProxima\(\): falta definirProxima/u);
  assert.throws(() => new Receptor({ segredo: 's', vistos: {} }), /vistos precisa de tem\(\), marcar\(\)/u);
  assert.throws(() => new Receptor({ segredo: 's', retidos: { carregar() {}, guardar() {} } }), /falta remover/u);
  assert.doesNotThrow(() => new Receptor({ segredo: 's', sequencias: undefined, vistos: null }));
});
