package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

// A typical ~1 KB publish payload: a few kept fields, personal data to hash
// or drop, a location to round and some bulk that is dropped.
const benchPayload = `{
	"jornadaId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
	"inicio": "2024-05-01T08:00:00-03:00",
	"fim": "2024-05-01T17:00:00-03:00",
	"servidor": {"cpf": "123.456.789-00", "nome": "Ana Maria da Silva", "matricula": "000123",
		"telefone": "+55 11 99999-0000", "email": "ana.silva@example.gov.br",
		"endereco": {"logradouro": "Rua das Flores", "numero": "123", "bairro": "Centro", "cep": "01000-000"}},
	"local": {"lat": -23.550520, "lng": -46.633308, "precisao": 12.5, "altitude": 760},
	"dispositivo": {"id": "a1b2c3d4e5f6", "modelo": "Pixel 7", "so": "Android 14", "app": "2.3.1"},
	"paradas": [
		{"id": 1, "lat": -23.551, "lng": -46.634, "motivo": "almoço", "obs": "restaurante da esquina"},
		{"id": 2, "lat": -23.552, "lng": -46.635, "motivo": "visita", "obs": "cliente pediu retorno"},
		{"id": 3, "lat": -23.553, "lng": -46.636, "motivo": "abastecimento", "obs": "posto 24h"}
	],
	"observacoes": "Jornada registrada pelo aplicativo móvel sem intercorrências relevantes ao longo do dia."
}`

func BenchmarkApply(b *testing.B) {
	dec := json.NewDecoder(strings.NewReader(benchPayload))
	dec.UseNumber()
	var in map[string]any
	if err := dec.Decode(&in); err != nil {
		b.Fatal(err)
	}
	p := mustCompile(b, Rules{
		Manter:     []string{"/jornadaId", "/inicio", "/paradas/*/id"},
		Hash:       []string{"/servidor/cpf"},
		Arredondar: []string{"/local"},
	})
	b.SetBytes(int64(len(benchPayload)))
	b.ReportAllocs()
	for b.Loop() {
		p.Apply(testKey, in)
	}
}
