"""Reads a workbook with openpyxl (a reader exportd does not write) and prints what a spreadsheet
user sees, as JSON: each sheet's name, direction, frozen pane, autofilter and cells, each cell
with its type as openpyxl reads it (`n` number, `s` string, `b` boolean, `d` date-time, `f`
formula, `e` error) and its value (a date-time in ISO 8601, as the sheet shows it).

With `--sheets` only the sheets' names and row counts, read from their dimensions (fast for a
workbook of a million rows)."""

import datetime
import json
import sys

import openpyxl


def cell(c):
    value = c.value
    if isinstance(value, (datetime.datetime, datetime.date)):
        value = value.isoformat()
    return {"t": c.data_type, "v": value, "format": c.number_format}


def main():
    path = sys.argv[1]
    if "--sheets" in sys.argv:
        book = openpyxl.load_workbook(path, read_only=True)
        print(json.dumps({"sheets": [{"name": ws.title, "rows": ws.max_row, "columns": ws.max_column} for ws in book.worksheets]}))
        return
    book = openpyxl.load_workbook(path)
    sheets = []
    for ws in book.worksheets:
        sheets.append({
            "name": ws.title,
            "rtl": bool(ws.sheet_view.rightToLeft),
            "freeze": ws.freeze_panes,
            "autofilter": ws.auto_filter.ref,
            "rows": [[cell(c) for c in row] for row in ws.iter_rows()],
        })
    print(json.dumps({"sheets": sheets, "created": book.properties.created.isoformat() if book.properties.created else None}, ensure_ascii=False))


if __name__ == "__main__":
    main()
