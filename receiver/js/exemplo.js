'use strict';
/*
 * Exemplo para quem escreve um CAD: um receptor de webhooks do Geohub que se
 * cadastra, verifica o próprio callback, registra uma ocorrência, despacha um
 * recurso e mostra o que recebe de volta.
 *
 * Contra um Geohub local em modo demo (que aceita callback http://127.0.0.1),
 * na raiz do repositório, num terminal:
 *
 *   go run ./cmd/geohub serve --demo
 *
 * e noutro:
 *
 *   GEOHUB_TOKEN=$(go run ./cmd/geohub token create --papel admin | tail -n1) node receiver/js/exemplo.js
 *
 * Ambiente: GEOHUB_URL (padrão http://localhost:8080), GEOHUB_TOKEN (um
 * token admin, obrigatório), PORTA (a do callback, padrão 9090). Ctrl+C sai.
 *
 * Escreve uma linha por evento aplicado (tipo, agregado, sequência) e uma
 * por descarte (motivo). A verificação do cadastro (integracao:verificacao)
 * é aceita e descartada (teste); o que este CAD mesmo causou volta como eco
 * e é descartado (eco-proprio); o desfecho de cada comando
 * (integracao:comando-*) é aplicado, e os jornada:* que o demo publica
 * também; a chegada ao local, marcada no fim por um OPERADOR, não é eco e
 * chega à projeção.
 *
 * O estado do receptor fica em memória: para um CAD que reinicia, veja
 * "Reinício e estado durável" no README (as opções sequencias, vistos e
 * retidos).
 *
 * Só usa node: — nenhuma dependência. Node.js 20 ou mais novo.
 */

const http = require('node:http');
const { randomUUID } = require('node:crypto');
const { Receptor } = require('./receptor.js');

const GEOHUB_URL = (process.env.GEOHUB_URL || 'http://localhost:8080').replace(/\/+$/u, '');
const GEOHUB_TOKEN = process.env.GEOHUB_TOKEN || '';
const PORTA = Number(process.env.PORTA || 9090);

/** Uma chamada à API do Geohub; lança com a resposta quando não é 2xx. */
async function api(metodo, caminho, { token, corpo, solicitacao } = {}) {
  const cabecalhos = { Authorization: `Bearer ${token}` };
  if (corpo !== undefined) cabecalhos['Content-Type'] = 'application/json';
  if (solicitacao) cabecalhos['x-solicitacao-id'] = randomUUID();
  const resposta = await fetch(`${GEOHUB_URL}${caminho}`, {
    method: metodo,
    headers: cabecalhos,
    body: corpo === undefined ? undefined : JSON.stringify(corpo),
  });
  const texto = await resposta.text();
  if (!resposta.ok) throw new Error(`${metodo} ${caminho}: ${resposta.status} ${texto.trim()}`);
  return texto === '' ? {} : JSON.parse(texto);
}

async function main() {
  if (GEOHUB_TOKEN === '') {
    console.error('defina GEOHUB_TOKEN com um token admin (veja o comentário do topo)');
    process.exit(2);
  }

  // 1. O receptor, escutando ANTES do cadastro: o verificar chama o callback.
  //    Segredo e id chegam com o cadastro.
  const receptor = new Receptor({
    segredos: [],
    aoAplicar: (envelope, entrega) => {
      const seq = entrega.sequencia ?? '-';
      console.log(`aplicado  ${envelope.tipo}  ${entrega.agregado}  sequência ${seq}`);
      const despachoId = envelope.payload.despacho?.id ?? envelope.payload.id;
      const despacho = receptor.despacho(despachoId);
      if (envelope.tipo.startsWith('ocorrencia:despacho') && despacho !== undefined) {
        console.log(`          despacho ${despacho.despachoId} (${despacho.recurso ?? '?'}): ${despacho.status}`);
      }
      if (envelope.tipo === 'ocorrencia:mudou-status') {
        console.log(`          ocorrência ${envelope.payload.id}: ${receptor.ocorrencia(envelope.payload.id)}`);
      }
    },
    aoDescartar: ({ eventoId, motivo }) => {
      console.log(`descarte  ${motivo}  evento ${eventoId ?? '?'}`);
    },
  });
  const servidor = http.createServer((req, res) => {
    if ((req.url ?? '').split('?')[0] !== '/geohub/eventos') {
      res.writeHead(404);
      res.end();
      return;
    }
    receptor.tratar(req, res);
  });
  await new Promise((ok, falha) => {
    servidor.once('error', falha);
    servidor.listen(PORTA, '127.0.0.1', ok);
  });
  const porta = servidor.address().port;
  const callback = `http://127.0.0.1:${porta}/geohub/eventos`;
  console.log(`escutando em ${callback}`);

  // 2. O cadastro (admin). segredo e api_key só aparecem nesta resposta.
  const cadastro = await api('POST', '/api/integradores', {
    token: GEOHUB_TOKEN,
    corpo: { nome: 'CAD exemplo (JS)', callback_url: callback, hosts_permitidos: ['127.0.0.1'] },
  });
  receptor.definirSegredos([cadastro.segredo]);
  receptor.definirIntegradorId(cadastro.id);
  console.log(`cadastrado como integrador ${cadastro.id}`);

  // 3. O Geohub manda um integracao:verificacao assinado ao callback: o
  //    receptor responde 204 e o descarta (motivo teste), sem aplicar.
  const verificacao = await api('POST', `/api/integradores/${cadastro.id}/verificar`, { token: GEOHUB_TOKEN });
  const tentativa = verificacao.tentativa ?? verificacao;
  console.log(`verificar: o callback respondeu ${tentativa.status_code ?? tentativa.erro ?? '?'}`);

  // 4. Como o CAD (api_key): registra uma ocorrência e despacha um recurso.
  //    Os dois eventos de domínio voltam como eco; os desfechos, não.
  const ocorrencia = await api('POST', '/api/ocorrencias', {
    token: cadastro.api_key,
    solicitacao: true,
    corpo: { natureza: 'incendio', endereco: 'Rua A, 10' },
  });
  console.log(`ocorrência ${ocorrencia.id} registrada (${ocorrencia.status})`);
  const despachada = await api('POST', `/api/ocorrencias/${ocorrencia.id}/despachos`, {
    token: cadastro.api_key,
    solicitacao: true,
    corpo: { recurso: { identificador: 'UR-12' } },
  });
  const despachoId = despachada.despacho?.id;
  console.log(`recurso UR-12 despachado (despacho ${despachoId ?? '?'})`);

  // 5. Um OPERADOR (o token admin) marca a chegada ao local: não é eco deste
  //    CAD (a autoria é usuario), e chega à projeção por despacho.
  if (despachoId !== undefined) {
    await api('POST', `/api/ocorrencias/${ocorrencia.id}/despachos/${despachoId}/status`, {
      token: GEOHUB_TOKEN,
      solicitacao: true,
      corpo: { para: 'no_local' },
    });
    console.log('um operador marcou UR-12 no local');
  }
  console.log('esperando eventos (Ctrl+C sai)');
}

const sair = () => process.exit(0);
process.on('SIGINT', sair);
process.on('SIGTERM', sair);

main().catch((erro) => {
  console.error(erro.message ?? erro);
  process.exit(1);
});
