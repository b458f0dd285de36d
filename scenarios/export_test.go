package scenarios

// SchemaFile is scenario.schema.json as written, for the test that keeps it equal to Schema.
func SchemaFile() []byte { return schemaFile }
