// What both engines' dialects share (db/dialect.hpp).
#include "db/dialect.hpp"

namespace slotted::db {

std::string dialect::adding(std::string_view table, std::string_view column) const {
  std::string out(column);
  out.append(" = ").append(existing(table, column)).append(" + ").append(incoming(column));
  return out;
}

std::string dialect::column_lines(const table_def& t, const char* (*type_name)(column_type),
                                  std::string_view (*choices)(column_type)) {
  std::string out;
  for (const auto& c : t.columns) {
    out.append("  ").append(c.name).append(" ").append(type_name(c.type));
    out.append(c.nullable ? " NULL" : " NOT NULL");
    if (!c.default_value.empty()) out.append(" DEFAULT ").append(c.default_value);
    if (choices != nullptr && !choices(c.type).empty())
      out.append(" CHECK (").append(c.name).append(" IN (").append(choices(c.type)).append("))");
    out.append(",\n");
  }
  out.append("  PRIMARY KEY (").append(t.primary_key).append(")");
  return out;
}

std::string dialect::schema_select(std::string_view where_table, std::string_view columns,
                                   std::string_view view, std::string_view quoted_table,
                                   std::string_view rest) {
  std::string out = "SELECT ";
  out.append(columns).append(" FROM information_schema.").append(view).append(where_table);
  out.append(quoted_table).append(rest);
  return out;
}

}  // namespace slotted::db
