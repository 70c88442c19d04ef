//! dlbind-codegen: spec -> IR -> templates -> generated/
